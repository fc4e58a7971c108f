"""The dataflow layer: scopes, streams, channels, capabilities and operators."""
