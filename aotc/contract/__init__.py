"""What a bundle records about eager's behaviour and the runtime replays: which tensors alias
(aliasing), the global state of the call (ambient), the outputs' structure (outputs), the
optimizer of a training step (optimizers), tensor subclasses (subclasses) and randomness."""
