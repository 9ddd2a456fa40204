"""`kvfuzz history`: every upstream class kvfuzz drives, run on each of a list of SGLang and vLLM
releases (each installed apart, in kvfuzz's cache), as a release x class table."""
