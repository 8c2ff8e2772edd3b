"""The fixed-width numbers of Kafka's schemas as struct format characters, shared by the
encoder (wire/encoder.py) and the decoder (wire/tagged.py). An error code is an int16 (an
IntEnum on the Python side). Booleans are left to each: the decoder refuses bytes other
than 0 and 1, which struct's "?" would read as True."""

NUMBER_CODES = {
    "int8": "b",
    "int16": "h",
    "int32": "i",
    "int64": "q",
    "uint8": "B",
    "uint16": "H",
    "uint32": "I",
    "uint64": "Q",
    "float64": "d",
    "error_code": "h",
}
