def train(args, step):
    if args.skip_train:
        return None
    else:
        loss = step()
        return loss


def sniff(tag):
    print(tag)
