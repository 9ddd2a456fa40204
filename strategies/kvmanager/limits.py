"""The limits of a "kvfuzz-kvmanager-trace/1" file (`codec.py`, `op_codec.py`)."""

# Limits no legitimate trace reaches: they bound memory and time (each op compares the state of
# every block and every live request's table; a request's tokens are hashed block by block).
MAX_BLOCKS, MAX_OPS, MAX_BLOCK_SIZE, MAX_LEN, MAX_LIST = 2**11, 2**11, 64, 2**14, 2**10
MAX_LOOKAHEAD = 16  # draft tokens a step (vLLM's num_speculative_tokens is a handful)
MAX_PAD = MAX_LOOKAHEAD  # placeholder draft rows of a padded admission (as many)
TOKEN_MAX = 2**31 - 1
MAX_KEY, MAX_IMAGES = 256, 64  # a request's extra keys: a LoRA name, path or salt; its images
