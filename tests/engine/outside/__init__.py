"""Outside implementations written as users write them: modules of their own that wrap or
re-export upstream classes, and classes that declare what they support (`__kvfuzz__`)."""
