"""Parser for XLA's HLO text (being written)."""


def parse_module(text: str, source: str = "<hlo>"):
    raise NotImplementedError("the HLO text parser is not written yet")
