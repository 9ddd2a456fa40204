"""The value every driver writes over each tensor it passed to an implementation, once the call
returns: the caller owns its tensors (a scheduler reuses its request-to-token rows), so an
implementation that kept one shows this value later. Torch-free, so the judges can name it."""

POISON = -99
