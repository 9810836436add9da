"""Documents out: the kept rows of a dedup written as JSON lines, CSV, TSV or text, the way
they came in."""

from __future__ import annotations

import base64
import csv
import datetime
import json
import tempfile
from collections.abc import Mapping, Sequence
from typing import IO, Any, TextIO

from simstore.io.inputs import Document, _json_value


class DocumentWriter:
    """Writes documents back in an input format: ``jsonl`` writes the record
    read (or ``{"id": key, "text": text}`` for text and directory inputs),
    ``text`` the line, ``csv``/``tsv`` the row under a header of every
    field of the rows written.

    A CSV header must come first, yet a later record may hold a field no
    earlier one did (JSON lines vary): so CSV and TSV rows are kept in a
    temporary file until :meth:`finish`, which writes the header (``header``
    first, then every other field in first-seen order, then the fields of
    ``last``) and then the rows, each with an empty cell for a field it
    lacks. No field is ever left out.
    """

    def __init__(
        self, stream: TextIO, fmt: str, header: Sequence[str] | None = None, last: Sequence[str] = ()
    ) -> None:
        self.stream = stream
        self.format = fmt
        # Every field name seen, in order (a dict keeps it): the header to be.
        self._fields: dict[str, None] = {} if header is None else dict.fromkeys([*header, *last])
        self._last = list(last)
        self._header_given = header is not None
        self._spool: IO[str] | None = None
        if fmt in ("csv", "tsv"):
            # Closed by finish(), or by close() after an error.
            self._spool = tempfile.TemporaryFile("w+", encoding="utf-8", newline="")  # noqa: SIM115

    def write(self, document: Document, extra: Mapping[str, Any] | None = None) -> None:
        """Write ``document``, with the fields of ``extra`` added (columns of
        a CSV row, keys of a JSON object; a text line cannot carry them)."""
        if self._spool is not None:
            record = _record_of(document)
            row = {name: _csv_value(value) for name, value in record.items()}
            if extra is not None:
                row.update(extra)
            for name in row:
                self._fields.setdefault(str(name), None)
            # A row's cells in header order as it stands: fields only ever
            # join the header at its end, so finish() pads the row's tail.
            cells = [_csv_cell(row.get(name)) for name in self._fields]
            self._spool.write(json.dumps(cells, ensure_ascii=False) + "\n")
        elif self.format == "text":
            self.stream.write(document.text.replace("\n", " ") + "\n")
        else:
            record = _record_of(document)
            if extra is not None:
                record = {**record, **extra}
            self.stream.write(json.dumps(record, ensure_ascii=False, default=_json_value) + "\n")

    def finish(self) -> None:
        """End the output: a CSV or TSV file's header, then its rows. With
        no row written, the ``header`` given still goes out alone, so that
        an output with no rows still names its columns."""
        if self._spool is None:
            return
        with self._spool:
            if not self._fields and not self._header_given:
                return
            # A spooled row's cells are in the order fields were seen; the
            # header puts ``last`` at the end.
            position = {name: index for index, name in enumerate(self._fields)}
            last = [name for name in self._last if name in position]
            names = [name for name in self._fields if name not in last] + last
            writer = csv.writer(
                self.stream, delimiter="," if self.format == "csv" else "\t", lineterminator="\n"
            )
            writer.writerow(names)
            self._spool.seek(0)
            for line in self._spool:
                cells = json.loads(line)
                cells += [""] * (len(position) - len(cells))
                writer.writerow([cells[position[name]] for name in names])

    def close(self) -> None:
        """Drop what :meth:`finish` did not write (after an error)."""
        if self._spool is not None:
            self._spool.close()


def _record_of(document: Document) -> dict[str, Any]:
    """The fields a document is written with: the JSON object or row read,
    or ``{"id": key, "text": text}`` for a text line or file."""
    if isinstance(document.record, dict):
        return document.record
    return {"id": document.key, "text": document.text}


def _csv_value(value: Any) -> Any:
    """A value as a CSV cell: lists and objects as JSON, bytes as base64,
    dates and times in ISO 8601 (the csv module writes others as text)."""
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict | list):
        return json.dumps(value, ensure_ascii=False, default=_json_value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    return value


def _csv_cell(value: Any) -> str:
    """A value as the text the csv module writes for it (``None`` as empty)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else str(value)
