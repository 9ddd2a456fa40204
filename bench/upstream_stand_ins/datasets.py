"""A stand-in for Hugging Face `datasets`, put last on the path of upstream's own tests where it
is not installed (`bench/upstream_tests.py`): SGLang's test kit imports its benchmark datasets,
which import `load_dataset` at module level; no allocator test loads one. Using it raises."""


def _not_here(*args, **kwargs):
    raise RuntimeError("kvfuzz's stand-in for Hugging Face `datasets`: not installed here "
                       "(bench/upstream_stand_ins/datasets.py); install it to load datasets")


load_dataset = concatenate_datasets = load_from_disk = _not_here


class Dataset:  # an annotation or isinstance() target at import; not to be built
    def __init__(self, *args, **kwargs):
        _not_here()


DatasetDict = IterableDataset = Dataset
