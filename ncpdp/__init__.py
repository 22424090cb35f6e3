"""ncpdp: a parser and serializer for NCPDP Telecommunication claims (D.0, 5.1, F6)
and NCPDP batch files (Batch 1.x).

Sans-IO and dependency-free: bytes or str in, immutable typed objects out, and back,
byte for byte (``serialize(parse(x)) == x``; ``serialize(parse_batch(x)) == x``).

>>> import ncpdp
>>> t = ncpdp.parse(raw)                    # doctest: +SKIP
>>> t.as_request().transactions[0].rx_number  # doctest: +SKIP
"""

from ._batch import (
    BATCH_HEADER,
    BATCH_TRAILER,
    BATCH_VERSIONS,
    Batch,
    BatchDetail,
    BatchHeader,
    BatchRecord,
    BatchSlot,
    BatchTrailer,
    is_batch,
    iter_batch,
    parse_batch,
    record_from_jsonable,
    record_to_jsonable,
)
from ._codecs import (
    decode_date,
    decode_implied,
    decode_overpunch,
    encode_date,
    encode_implied,
    encode_overpunch,
)
from ._errors import CodecError, ModelError, NcpdpError, ParseError, SerializeError
from ._fields import FIELDS, FieldDef, field_name
from ._json import decode_value, from_jsonable, to_jsonable
from ._model import (
    FIELD_SEPARATOR,
    GROUP_SEPARATOR,
    SEGMENT_SEPARATOR,
    Field,
    Header,
    RequestHeader,
    ResponseHeader,
    Segment,
    TransactionGroup,
    Transmission,
    only_transaction,
    segment_name,
)
from ._parser import TOLERATED_LIMIT, parse
from ._serializer import serialize
from ._versions import VERSIONS, HeaderSlot, VersionSpec
from ._views import (
    AdditionalMessage,
    PatientView,
    PreferredProduct,
    QualifiedId,
    RejectCode,
    RequestTransactionView,
    RequestView,
    ResponseTransactionView,
    ResponseView,
)

__all__ = [
    "parse",
    "serialize",
    "TOLERATED_LIMIT",
    "parse_batch",
    "iter_batch",
    "is_batch",
    "record_to_jsonable",
    "record_from_jsonable",
    "Batch",
    "BatchHeader",
    "BatchDetail",
    "BatchTrailer",
    "BatchRecord",
    "BatchSlot",
    "BATCH_HEADER",
    "BATCH_TRAILER",
    "BATCH_VERSIONS",
    "Transmission",
    "only_transaction",
    "TransactionGroup",
    "Segment",
    "Field",
    "Header",
    "RequestHeader",
    "ResponseHeader",
    "SEGMENT_SEPARATOR",
    "FIELD_SEPARATOR",
    "GROUP_SEPARATOR",
    "segment_name",
    "NcpdpError",
    "ParseError",
    "SerializeError",
    "CodecError",
    "ModelError",
    "FIELDS",
    "FieldDef",
    "field_name",
    "VERSIONS",
    "VersionSpec",
    "HeaderSlot",
    "decode_date",
    "encode_date",
    "decode_implied",
    "encode_implied",
    "decode_overpunch",
    "encode_overpunch",
    "decode_value",
    "to_jsonable",
    "from_jsonable",
    "RequestView",
    "RequestTransactionView",
    "PatientView",
    "ResponseView",
    "ResponseTransactionView",
    "RejectCode",
    "AdditionalMessage",
    "PreferredProduct",
    "QualifiedId",
]
