"""placeholder"""


def patch_transformers(model=None):
    raise NotImplementedError
