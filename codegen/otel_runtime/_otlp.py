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

from . import _ids

# False: the lean recorder hands ReadableSpans to the exporter (the benchmarks flip it).
ENABLED = True

_pack_d = struct.Struct("<d").pack
_pack_i = struct.Struct("<I").pack
# A Span's trace id field and the span id field's tag and length (20 bytes, made once per trace),
# the span id (big-endian), with its parent's span id field (tag and length, 0x2208) or without;
# the start time (the tag is the template's last byte), the end time field (fixed64).
_pack_parented = struct.Struct(">20sQHQ").pack
_pack_root = struct.Struct(">20sQ").pack
_pack_times = struct.Struct("<QBQ").pack
_pack_id = struct.Struct(">Q").pack
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

    draws_ids = True  # ``encode`` draws the span ids nobody asked for yet

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
        # by span name, or by span name and call-site attribute set (``_template``)
        self._templates: dict[Any, tuple[bytes, bytes, bytes] | None] = {}
        self.by_sdk = 0  # lean spans written by the SDK's encoder (``encode``)
        # the module of the lean spans' ids: its lock (``_ID_LOCK``) is held while ids are drawn
        self.id_module: Any = importlib.import_module(lean_type.__module__)
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
        encoded (left out). Draws the span ids nobody asked for yet (a span's and its parent's),
        under one hold of the id lock for the whole batch.

        One pass, one join: a lean span's ``Span`` field is three pieces appended to one list:
        the bytes its span name and call-site attribute set always give (the field's tag and
        length, the name, kind, attributes, status and flags: ``_template``, remembered), its
        times packed at once, its trace id, span id and parent id packed at once (the fields in
        another order than the SDK's: protobuf reads them in any). The request's head is written
        last, when the lengths are known. A span this does not write (events, links, a status, a
        trace state, attributes the SDK's validation must see) is made a ``ReadableSpan`` and
        written by the SDK's encoder (counted in ``by_sdk``)."""
        lean_type, templates = self.lean_type, self._templates
        if not self.plain_limits:
            lean_type = None  # every lean span the slow way (``_lean``)
        next_id, draw = _ids.span_ids(len(batch)), _ids.span_id
        pack_times, pack_root, pack_parented = _pack_times, _pack_root, _pack_parented
        parts: list[bytes] = []
        extend = parts.extend
        others: list[Any] = []  # SDK spans of another resource or scope
        failed = single = 0
        trace: Any = None
        field = b""  # the trace id field and the span id's tag and length, of ``trace``
        with self.id_module._ID_LOCK:  # the training thread may ask an id meanwhile (span_id)
            for span in batch:
                try:
                    if type(span) is lean_type and span._more is None:  # no events, links, status
                        if span._trace is not trace:
                            trace = span._trace
                            field = (
                                b""
                                if trace[2]
                                else b"\x0a\x10" + trace[0].to_bytes(16, "big") + b"\x12\x08"
                            )
                        extra = span._extra
                        try:  # the key as ``_template`` makes it
                            template = templates[
                                (
                                    (span._name, *extra.items(), *map(type, extra.values()))
                                    if extra
                                    else span._name
                                )
                            ]
                        except (KeyError, TypeError):  # not yet, or an unhashable value
                            template = self._template(span._name, extra)
                        if template is not None and field:
                            span_id = span._id
                            if not span_id:
                                span_id = span._id = next_id() or draw()
                            parent = span._parent
                            if parent is None:
                                extend(
                                    (
                                        template[0],
                                        pack_times(span._start, 0x41, span._end),
                                        pack_root(field, span_id),
                                    )
                                )
                                continue
                            if type(parent) is lean_type:
                                parent_id = parent._id
                                if not parent_id:
                                    parent_id = parent._id = next_id() or draw()
                                extend(
                                    (
                                        template[1],
                                        pack_times(span._start, 0x41, span._end),
                                        pack_parented(field, span_id, 0x2208, parent_id),
                                    )
                                )
                                continue
                    # one piece each (the spans written above are three)
                    if type(span) is self.lean_type:
                        extend((self._lean(span),))
                        single += 1
                    elif span.resource is self.resource or (
                        span.resource == self.resource and span.instrumentation_scope == self.scope
                    ):
                        extend((_field(b"\x12", self._by_sdk(span)),))
                        single += 1
                    else:
                        others.append(span)
                except Exception:
                    failed += 1
        count = single + (len(parts) - single) // 3
        if parts:  # spans of this resource and scope (the others come next)
            spans = b"".join(parts)
            scope_size = len(self.scope_head) + len(spans)
            resource_size = len(self.resource_head) + 1 + len(_varint(scope_size)) + scope_size
            data = b"".join(
                (
                    b"\x0a",
                    _varint(resource_size),
                    self.resource_head,
                    b"\x12",
                    _varint(scope_size),
                    self.scope_head,
                    spans,
                )
            )
        else:
            data = b""
        if others:
            try:
                data += self.encode_spans(others).SerializeToString()
                count += len(others)
            except Exception:
                failed += len(others)
        return data, count, failed

    def _lean(self, span: Any) -> bytes:
        """A lean span's ``Span`` field the slow way (its ids drawn; the id lock is held): a
        foreign parent, a trace state, a status, events, links, attributes the SDK's validation
        must see (then by the SDK's encoder, counted in ``by_sdk``)."""
        bits, draw = _ids.bits, _ids.span_id
        if not span._id:
            span._id = bits(64) or draw()
        parent = span._parent
        if type(parent) is self.lean_type and not parent._id:
            parent._id = bits(64) or draw()
        trace = span._trace
        tail: bytes | None = None
        if span._more is None and not trace[2] and self.plain_limits:  # no events, links, status
            name = span._name
            entry = self._names.get(name) or self._name(name)
            extra = span._extra
            tail = self._tail(name, extra, entry) if extra else entry[1]
        if tail is None:
            self.by_sdk += 1
            return _field(b"\x12", self._by_sdk(self.materialize(span)))
        ids = b"\x0a\x10" + trace[0].to_bytes(16, "big") + b"\x12\x08" + _pack_id(span._id)
        if parent is not None:
            ids += b"\x22\x08" + _pack_id(
                parent._id if type(parent) is self.lean_type else parent.span_id
            )
            if type(parent) is not self.lean_type and parent.is_remote:
                tail = tail[: -len(_LOCAL_FLAGS)] + _REMOTE_FLAGS
        times = _pack_times(span._start, 0x41, span._end)
        return _field(b"\x12", ids + entry[0] + tail + b"\x39" + times)

    def _template(
        self, name: str, extra: dict[str, Any] | None
    ) -> tuple[bytes, bytes, bytes] | None:
        """The bytes of a span of this name and call-site attribute set that are not its ids
        and times: without a parent, with one (the ``Span`` field's tag and length, the name
        and kind, the attributes, status and flags, the start time's tag), and the attributes,
        status and flags alone; None when the SDK's validation must see the attributes.
        Remembered by the name alone, or by the name, the call site's items and their values'
        types (a layer number, a microbatch: the same few sets again and again), at most
        ``_EXTRA_CACHE`` sets, then the cache starts over; never a set with a float (equal floats
        may differ in their bytes: 0.0, -0.0) or a value that cannot be hashed."""
        entry = self._names.get(name) or self._name(name)
        tail = self._tail(name, extra, entry) if extra else entry[1]
        template = None
        if tail is not None:
            fields = entry[0] + tail + b"\x39"
            size = len(fields) + 45  # the ids (trace id, span id: 28 bytes), the times (17)
            template = (
                b"\x12" + _varint(size) + fields,
                b"\x12" + _varint(size + 10) + fields,  # the parent id field (10 bytes)
                tail,
            )
        key: Any = name
        if extra:
            # the items and the values' types (1, True and 1.0 are equal keys); made whole, never
            # by tuple(map(...)), whose resized tuple leaves the collector's count one higher each
            # time (a collection every 700 spans with call-site attributes)
            key = (name, *extra.items(), *map(type, extra.values()))
            if float in key[1 + len(extra) :]:
                return template
            try:
                hash(key)
            except TypeError:
                return template
        if len(self._templates) >= _EXTRA_CACHE:
            self._templates.clear()
        self._templates[key] = template
        return template

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
        name: str,
        extra: dict[str, Any],
        entry: tuple[bytes, bytes | None, int, frozenset[str]],
    ) -> bytes | None:
        """The attributes (the name's own and ``extra``), status and flags fields of a span; None
        when the SDK's validation must see the attributes."""
        base_tail, base_keys = entry[1], entry[3]
        if base_tail is None:
            return None
        if len(base_keys) + len(extra) > self.max_attributes or not base_keys.isdisjoint(extra):
            values = dict(self.base.get(name, ()))
            values.update(extra)
            if len(values) > self.max_attributes:
                return None
            encoded = self._attributes(values)
            return None if encoded is None else encoded + _STATUS_UNSET + _LOCAL_FLAGS
        more = self._attributes(extra)
        return None if more is None else base_tail[:-_TAIL_END] + more + base_tail[-_TAIL_END:]

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
        """``_attributes`` of a call site's attributes, as ``_template`` remembers them (with a
        span name that has no attributes of its own)."""
        name = "\x00extra"
        self._names.setdefault(name, (b"", _STATUS_UNSET + _LOCAL_FLAGS, 0, frozenset()))
        try:
            template = self._templates[(name, *extra.items(), *map(type, extra.values()))]
        except (KeyError, TypeError):
            template = self._template(name, extra)
        return None if template is None else template[2][:-_TAIL_END]


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
    try:
        post = _direct_client(client).export
    except Exception:  # every request through the session's request(), as before
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


def _direct_client(client: Any) -> Any:
    """The exporter's HTTP client (its retries, backoff, timeout, compression, headers, shutdown
    event and error logging), its requests sent by ``_DirectTransport``: a copy of the client whose
    transport is that one; the client itself when its transport is not the ``requests`` one."""
    import copy

    transport = getattr(client, "_transport", None)
    kind = type(transport)
    if kind.__name__ != "RequestsHTTPTransport" or not kind.__module__.startswith(
        "opentelemetry.exporter.http.transport"
    ):
        return client
    import requests

    session = getattr(transport, "_session", None)
    endpoint = getattr(client, "_endpoint", None)
    headers = getattr(client, "_headers", None)
    if type(session) is not requests.Session or not isinstance(endpoint, str):
        return client
    if not isinstance(headers, dict):
        return client
    direct = copy.copy(client)
    direct._transport = _DirectTransport(transport, session, endpoint, headers)
    return direct


class _DirectTransport:
    """The exporter's ``requests`` transport without the per-request work of
    ``Session.request`` that gives the same request every time: the request to the exporter's
    endpoint with its headers is prepared once by the session (``prepare_request``: the session's
    and the exporter's headers merged), and each request is a copy of it with the body and its
    ``Content-Length``, sent by ``Session.send`` with the session's merged settings
    (``merge_environment_settings``: proxies, stream, verify, cert; merged again when the
    session's change), the client's timeout and no redirects, as ``Session.request`` sends it.
    The bytes on the wire are the same. Whenever the prepared request could differ (the session
    trusts the environment, has credentials, parameters, hooks or cookies, its or the exporter's
    headers changed, another URL or method, a body that is not bytes) the request goes through
    the exporter's transport itself. Counted by callgrind: two fifths of the HTTP client's
    instructions per request (``Request``, ``prepare_request``, the cookie jars made and
    merged, the headers and settings merged)."""

    def __init__(self, base: Any, session: Any, url: str, headers: dict[str, str]) -> None:
        import requests

        self.base = base
        self.session = session
        self.url = url
        self.result = importlib.import_module(type(base).__module__).RequestsHTTPResult
        self.prepared_class = requests.PreparedRequest
        self.template: Any = None
        self.headers: dict[str, str] = {}
        self.session_headers: list[tuple[str, str]] = []
        # the session's settings the request is sent with, merged when it was prepared, and the
        # session's proxies, stream, verify and cert then
        self.settings: dict[str, Any] = {}
        self.session_settings: tuple[Any, ...] = ()

    def _prepared(self, headers: dict[str, str]) -> Any:
        """The request prepared once by the session (``prepare_request``), for these headers and
        the session's now."""
        import requests

        session = self.session
        self.template = session.prepare_request(
            requests.Request(method="POST", url=self.url, headers=headers, data=b"\x00")
        )
        self.headers = dict(headers)
        self.session_headers = list(session.headers.items())
        self.settings = session.merge_environment_settings(self.url, {}, None, None, None)
        self.session_settings = (
            dict(session.proxies),
            session.stream,
            session.verify,
            session.cert,
        )
        return self.template

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        data: bytes | None = None,
    ) -> Any:
        """Send ``data`` as the exporter's transport would: a ``RequestsHTTPResult``."""
        session = self.session
        if (
            method != "POST"
            or url != self.url
            or not data
            or type(data) is not bytes
            or headers is None
            or session.trust_env
            or session.auth is not None
            or session.params
            or session.cookies
            or any(session.hooks.values())
        ):
            return self.base.request(method, url, headers=headers, timeout=timeout, data=data)
        try:
            template = self.template
            if (
                template is None
                or headers != self.headers
                or list(session.headers.items()) != self.session_headers
                or (session.proxies, session.stream, session.verify, session.cert)
                != self.session_settings
            ):
                template = self._prepared(headers)
            prepared: Any = self.prepared_class()
            prepared.method = template.method
            prepared.url = template.url
            prepared.headers = template.headers.copy()
            prepared.headers["Content-Length"] = str(len(data))
            prepared._cookies = template._cookies
            prepared.hooks = template.hooks
            prepared.body = data
            response = session.send(
                prepared, timeout=timeout, allow_redirects=False, **self.settings
            )
        except Exception as error:
            return self.result(error=error)
        return self.result(
            status_code=response.status_code, reason=response.reason, response=response
        )

    def is_connection_error(self, exception: Exception | None) -> bool:
        """Whether the exporter's transport counts ``exception`` a connection error."""
        return bool(self.base.is_connection_error(exception))

    def close(self) -> None:
        """Close the exporter's transport (its session)."""
        self.base.close()
