def spaces(x):
    return x


def tabs(items):
	for item in items:
		if item:
			print(item)
	return len(items)
