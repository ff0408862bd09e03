"""OTLP/protobuf bytes straight from the lean path's records, for the OTLP/HTTP exporter.

The lean recorder's export thread used to turn every ``LeanSpan`` into the SDK's ``ReadableSpan``
and hand the batch to the exporter, whose encoder builds a protobuf message per span, attribute
and value in Python (about 25-40 us a span, holding the GIL). Here a span is written as protobuf
wire bytes directly: the ids, name, kind, times, flags and status by a few ``bytes`` operations;
a span name's own attributes (``megatron.span_group`` and the like) encoded once per recorder;
the resource and the scope encoded once (by the SDK's own encoder, so they are exactly what it
sends); the request sent by the exporter's HTTP client, with its retries, timeout, compression
and headers.

What a backend receives is what the SDK path sends, message for message: a span this encoder
does not write itself (events, links, a status set, a trace state, attributes that the SDK's
validation or limits would change, an SDK span of the same provider) is made a ``ReadableSpan``
and encoded by the SDK's encoder (``encode_spans``), then joined to the same request.
``tests/megatron_cpu/test_otlp_encoding.py`` compares both encodings of the same spans.

Used only with the OTLP/HTTP span exporter of ``opentelemetry-exporter-otlp-proto-http`` whose
request client the runtime can reach (``sender``); any other exporter gets ``ReadableSpan``
objects, as before. ``ENABLED = False`` turns it off (the benchmarks compare both).
"""

from __future__ import annotations

import importlib
import os
import struct
from collections.abc import Callable, Sequence
from typing import Any

# False: the lean recorder hands ReadableSpans to the exporter (the benchmarks flip it).
ENABLED = True

_pack_d = struct.Struct("<d").pack
_pack_i = struct.Struct("<I").pack
# A Span's trace id field (written once per trace) and span id field (tag, length, the id
# big-endian), with its parent's span id field or without; its start and end time fields (fixed64).
_pack_parented = struct.Struct(">18sBBQBBQ").pack
_pack_ids = struct.Struct(">18sBBQ").pack
_pack_times = struct.Struct("<BQBQ").pack
_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_MASK64 = 2**64 - 1
# Span.flags: SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, | SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK
_LOCAL_FLAGS = b"\x85\x01" + _pack_i(0x100)
_REMOTE_FLAGS = b"\x85\x01" + _pack_i(0x300)
# Span.kind = SPAN_KIND_INTERNAL; Span.status = Status() (unset, no message)
_KIND_INTERNAL = b"\x30\x01"
_STATUS_UNSET = b"\x7a\x00"
# The status and flags fields that end a span's tail (``SpanEncoder._tail``).
_TAIL_END = len(_STATUS_UNSET + _LOCAL_FLAGS)
_BOOLS = {True: b"\x10\x01", False: b"\x10\x00"}
# Call-site attribute sets whose bytes an encoder remembers, at most (``_extra_attributes``).
_EXTRA_CACHE = 4096
_MISSING: Any = object()


def _varint(value: int) -> bytes:
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: its tag, the length, the payload."""
    size = len(payload)
    return tag + (bytes((size,)) if size < 0x80 else _varint(size)) + payload


def _any_value(value: Any) -> bytes | None:
    """An ``AnyValue``'s bytes for a plain value; None for anything else."""
    kind = type(value)
    if kind is str:
        return _field(b"\x0a", value.encode("utf-8"))
    if kind is bool:
        return _BOOLS[value]
    if kind is int:
        if not _INT64_MIN <= value <= _INT64_MAX:
            return None
        return b"\x18" + _varint(value & _MASK64)
    if kind is float:
        return b"\x21" + _pack_d(value)
    return None


class SpanEncoder:
    """Writes a batch of the recorder's spans as one ``ExportTraceServiceRequest``."""

    def __init__(
        self,
        resource: Any,
        scope: Any,
        base: Any,
        limits: Any,
        lean_type: type,
        materialize: Callable[[Any], Any],
    ) -> None:
        # imported by name: the exporter package is the job's (installed with the OTLP exporter),
        # not a dependency of the runtime's type checks
        encode_spans = importlib.import_module(
            "opentelemetry.exporter.otlp.proto.common.trace_encoder"
        ).encode_spans
        from opentelemetry.sdk.trace import ReadableSpan
        from opentelemetry.trace import SpanContext

        self.encode_spans = encode_spans
        self.resource = resource
        self.scope = scope
        self.base = base
        self.lean_type: Any = lean_type
        self.materialize = materialize
        self.max_attributes = limits.max_span_attributes
        # with a value length limit the SDK's validation may cut values: such spans go its way
        self.plain_limits = limits.max_span_attribute_length is None
        self._names: dict[str, tuple[bytes, bytes | None, int, frozenset[str]]] = {}
        self._keys: dict[str, bytes] = {}
        self._tails: dict[tuple[Any, ...], bytes | None] = {}
        self.by_sdk = 0  # lean spans written by the SDK's encoder (``encode``)
        self._span_heads: dict[int, bytes] = {}  # a Span field's tag and length, by the length
        # the last trace written and its trace id field (a batch's spans share one trace tuple)
        self._trace: Any = None
        self._trace_field = b""
        # the resource's and the scope's bytes, as the SDK encodes them
        probe = ReadableSpan(
            name="probe",
            context=SpanContext(1, 1, False),
            resource=resource,
            instrumentation_scope=scope,
        )
        self.resource_head, self.scope_head = self._heads(probe)

    def _heads(self, readable: Any) -> tuple[bytes, bytes]:
        request = self.encode_spans([readable])
        resource_spans = request.resource_spans[0]
        scope_spans = resource_spans.scope_spans[0]
        del scope_spans.spans[:]
        scope_head: bytes = scope_spans.SerializeToString()
        del resource_spans.scope_spans[:]
        resource_head: bytes = resource_spans.SerializeToString()
        return resource_head, scope_head

    # -- a batch

    def encode(self, batch: Sequence[Any]) -> tuple[bytes, int, int]:
        """The request's bytes, the number of spans in it and the number that could not be
        encoded (left out).

        One pass, one join: a lean span's ``Span`` field is written as five pieces (its tag and
        length, the ids packed at once, the name's fields, the times packed at once, the
        attributes, status and flags remembered per span name and call-site attribute set) into
        one list, whose head is written last, when the lengths are known. A span this does not
        write (events, links, a status, a trace state, attributes the SDK's validation must see)
        is made a ``ReadableSpan`` and written by the SDK's encoder (counted in ``by_sdk``)."""
        lean_type, plain = self.lean_type, self.plain_limits
        names, tails, heads = self._names, self._tails, self._span_heads
        parts: list[bytes] = [b""]  # [0]: the request's head, written last
        extend = parts.extend
        others: list[Any] = []  # SDK spans of another resource or scope
        failed = count = 0
        for span in batch:
            try:
                if type(span) is not lean_type:
                    if span.resource is self.resource or (
                        span.resource == self.resource and span.instrumentation_scope == self.scope
                    ):
                        extend((_field(b"\x12", self._by_sdk(span)),))
                        count += 1
                    else:
                        others.append(span)
                    continue
                trace = span._trace
                tail: bytes | None = None
                if span._more is None and not trace[2] and plain:  # no events, links, status
                    name = span._name
                    entry = names.get(name) or self._name(name)
                    extra = span._extra
                    if extra:
                        try:  # the values' types too: 1, True and 1.0 are equal keys
                            key = (name, tuple(extra.items()), tuple(map(type, extra.values())))
                            tail = tails.get(key, _MISSING)
                        except TypeError:  # an unhashable value
                            key, tail = None, _MISSING
                        if tail is _MISSING:
                            tail = self._tail(key, name, extra, entry)
                    else:
                        tail = entry[1]
                if tail is None:
                    self.by_sdk += 1
                    extend((_field(b"\x12", self._by_sdk(self.materialize(span))),))
                    count += 1
                    continue
                if trace is not self._trace:
                    self._trace_field = b"\x0a\x10" + trace[0].to_bytes(16, "big")
                    self._trace = trace
                parent = span._parent
                if parent is None:
                    ids = _pack_ids(self._trace_field, 0x12, 8, span._id or span.span_id)
                    size = entry[2] + len(tail)
                else:
                    if type(parent) is lean_type:  # its id drawn with the batch's (draw_ids)
                        parent_id = parent._id or parent.span_id
                    else:  # a SpanContext: a foreign parent
                        parent_id = parent.span_id
                        if parent.is_remote:
                            tail = tail[: -len(_LOCAL_FLAGS)] + _REMOTE_FLAGS
                    ids = _pack_parented(
                        self._trace_field, 0x12, 8, span._id or span.span_id, 0x22, 8, parent_id
                    )
                    size = entry[2] + 10 + len(tail)
                head = heads.get(size)
                if head is None:
                    head = heads[size] = b"\x12" + _varint(size)
                extend((head, ids, entry[0], _pack_times(0x39, span._start, 0x41, span._end), tail))
                count += 1
            except Exception:
                failed += 1
        if count:  # spans of this resource and scope (the others come next)
            scope_size = len(self.scope_head) + sum(map(len, parts))
            resource_size = len(self.resource_head) + 1 + len(_varint(scope_size)) + scope_size
            parts[0] = b"".join(
                (
                    b"\x0a",
                    _varint(resource_size),
                    self.resource_head,
                    b"\x12",
                    _varint(scope_size),
                    self.scope_head,
                )
            )
            data = b"".join(parts)
        else:
            data = b""
        if others:
            try:
                data += self.encode_spans(others).SerializeToString()
                count += len(others)
            except Exception:
                failed += len(others)
        return data, count, failed

    def _fast(self, span: Any) -> bytes | None:
        """A request with the lean span ``span`` alone, written by ``encode`` itself; None when
        the SDK's encoder must write it."""
        by_sdk = self.by_sdk
        data, count, _failed = self.encode([span])
        return data if count and self.by_sdk == by_sdk else None

    def _by_sdk(self, readable: Any) -> bytes:
        """One ``Span`` message's bytes, by the SDK's encoder."""
        request = self.encode_spans([readable])
        data: bytes = request.resource_spans[0].scope_spans[0].spans[0].SerializeToString()
        return data

    def _name(self, name: str) -> tuple[bytes, bytes | None, int, frozenset[str]]:
        """A span name's name and kind fields, the tail of a span with no call-site attributes
        (``_tail``: None when the SDK's validation must see them), the size of the message's
        fixed fields besides that tail (no parent) and the name's own attribute keys."""
        entry = self._names.get(name)
        if entry is None:
            base = dict(self.base.get(name, ()))
            encoded = self._attributes(base) if len(base) <= self.max_attributes else None
            fields = _field(b"\x2a", name.encode("utf-8")) + _KIND_INTERNAL
            tail = None if encoded is None else encoded + _STATUS_UNSET + _LOCAL_FLAGS
            # trace id and span id fields (28 bytes), the name's fields, both times (18 bytes)
            fixed = 28 + len(fields) + 18
            entry = self._names[name] = (fields, tail, fixed, frozenset(base))
        return entry

    def _tail(
        self,
        key: tuple[Any, ...] | None,
        name: str,
        extra: dict[str, Any],
        entry: tuple[bytes, bytes | None, int, frozenset[str]],
    ) -> bytes | None:
        """The attributes (the name's own and ``extra``), status and flags fields of a span; None
        when the SDK's validation must see the attributes. Remembered by ``key`` (the name, the
        call site's items and their values' types: a layer number, a microbatch, the same few
        sets again and again), at most ``_EXTRA_CACHE`` sets, then the cache starts over; never a
        set with a float (equal floats may differ in their bytes: 0.0, -0.0)."""
        base_tail, base_keys = entry[1], entry[3]
        if base_tail is None:
            return None
        if len(base_keys) + len(extra) > self.max_attributes or not base_keys.isdisjoint(extra):
            values = dict(self.base.get(name, ()))
            values.update(extra)
            if len(values) > self.max_attributes:
                return None
            encoded = self._attributes(values)
            tail = None if encoded is None else encoded + _STATUS_UNSET + _LOCAL_FLAGS
        else:
            more = self._attributes(extra)
            tail = None if more is None else base_tail[:-_TAIL_END] + more + base_tail[-_TAIL_END:]
        if key is not None and float not in key[2]:
            if len(self._tails) >= _EXTRA_CACHE:
                self._tails.clear()
            self._tails[key] = tail
        return tail

    def _attributes(self, values: dict[str, Any]) -> bytes | None:
        out = []
        keys = self._keys
        for key, value in values.items():
            prefix = keys.get(key)
            if prefix is None:
                if type(key) is not str:
                    return None
                prefix = keys[key] = _field(b"\x0a", key.encode("utf-8"))
            encoded = _any_value(value)
            if encoded is None:
                return None
            out.append(_field(b"\x4a", prefix + _field(b"\x12", encoded)))
        return b"".join(out)

    def _extra_attributes(self, extra: dict[str, Any]) -> bytes | None:
        """``_attributes`` of a call site's attributes, as ``_tail`` remembers them (with a
        span name that has no attributes of its own)."""
        name = "\x00extra"
        try:
            key: tuple[Any, ...] | None = (
                name,
                tuple(extra.items()),
                tuple(map(type, extra.values())),
            )
            tail = self._tails.get(key, _MISSING)  # type: ignore[arg-type]
        except TypeError:
            key, tail = None, _MISSING
        if tail is _MISSING:
            self._names.setdefault(name, (b"", b"" + _STATUS_UNSET + _LOCAL_FLAGS, 0, frozenset()))
            tail = self._tail(key, name, extra, self._names[name])
        return None if tail is None else tail[:-_TAIL_END]


def sender(exporter: Any) -> Callable[[bytes], bool] | None:
    """A function that sends an encoded request through ``exporter`` (the OTLP/HTTP span exporter
    of ``opentelemetry-exporter-otlp-proto-http``: its HTTP client, retries and timeout) and
    says whether it succeeded; None for any other exporter, or when the exporter's own metrics are
    on (they count its ``export`` calls)."""
    if not ENABLED:
        return None
    kind = type(exporter)
    if kind.__name__ != "OTLPSpanExporter" or not kind.__module__.startswith(
        "opentelemetry.exporter.otlp.proto.http"
    ):
        return None
    if os.environ.get("OTEL_PYTHON_SDK_INTERNAL_METRICS_ENABLED", "").strip().lower() == "true":
        return None
    client = getattr(exporter, "_client", None)
    post = getattr(client, "export", None)
    if post is None:
        return None
    limit = getattr(exporter, "_max_request_size", 0) or 0
    try:
        settle_environment(client)
    except Exception:  # the session keeps reading the environment per request
        pass

    def send(data: bytes) -> bool:
        if getattr(exporter, "_shutdown", False):
            return False
        if 0 < limit < len(data):
            from ._state import LOG

            LOG.warning(
                "telemetry: dropping a span batch of %d bytes (over max_request_size %d bytes)",
                len(data),
                limit,
            )
            return False
        return bool(post(data).success)

    return send


def settle_environment(client: Any) -> None:
    """Read once what ``requests`` reads from the environment on every request of a session that
    trusts it, for the exporter's one endpoint, and have the session stop reading it: the proxies
    (``HTTP(S)_PROXY``, ``ALL_PROXY``, ``NO_PROXY``), a ``.netrc``'s credentials, the CA bundle
    (``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``). Every request then goes out as it went before
    (requests' own precedence: the environment's proxies over the session's, its bundle over the
    session's ``verify``, a netrc only without credentials of the session's), while the
    environment stays as it was when the exporter was handed to the runtime; without it, each
    request read the environment about 200 times and looked for a ``.netrc`` twice (two fifths of
    the HTTP client's instructions per request, counted by callgrind). Only a plain
    ``requests.Session`` of the exporter's HTTP transport is touched."""
    session: Any = getattr(getattr(client, "_transport", None), "_session", None)
    endpoint = getattr(client, "_endpoint", None)
    if not isinstance(endpoint, str) or getattr(session, "trust_env", None) is not True:
        return
    import requests
    from requests.utils import get_environ_proxies, get_netrc_auth

    if type(session) is not requests.Session:
        return
    proxies = get_environ_proxies(endpoint, no_proxy=None)
    auth = None if session.auth else get_netrc_auth(endpoint)
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    session.proxies = {**session.proxies, **proxies}
    if auth:
        session.auth = auth
    if bundle:
        session.verify = bundle
    session.trust_env = False
