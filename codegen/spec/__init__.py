"""The spec model: YAML files read with positions into frozen dataclasses (one reader module per
construct, one field table per spec object), the fixed vocabulary, the JSON Schema and the
semantic-convention attributes."""
