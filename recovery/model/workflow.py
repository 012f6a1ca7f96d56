"""The workflow model: plain, frozen, typed data with no Spark and no Redis in it.

A Workflow is what the XML describes (see schemas/workflow.xsd). The engine executes a
Workflow; recovery synthesis maps (Workflow, failed positions) to another Workflow.
"""
from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Annotated, Literal, overload

from pydantic import BaseModel, ConfigDict, Field, field_validator

from recovery.errors import RecoveryError
from recovery.model import config as config_decl
from recovery.model.failed import DEAD_LETTER_FIELDS

DEFAULT_STREAM = "default"
NAMESPACE = "urn:recovery:workflow:1"

# The schema's idType and streamIdType (model/xml/workflow.xsd), for workflows built in code
# too: a component id names keys, spill folders and sink part files, so it never holds "/",
# ":", "{" or "}" and never starts with "." (tracking/keys.py says why).
ID_MAX = 200
COMPONENT_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-]*")
STREAM_ID = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.\-]*")

# A topic's name, as Kafka's: 1 to 249 letters, digits, ".", "_", "-", and neither "." nor "..".
TOPIC_MAX = 249
TOPIC = re.compile(r"[A-Za-z0-9._-]{1,%d}" % TOPIC_MAX)


def check_topic(topic: str) -> str:
    """`topic` if it is a valid topic name (Kafka's rule), else a RecoveryError (exit 2)."""
    if not isinstance(topic, str) or not TOPIC.fullmatch(topic) or topic in (".", ".."):
        shown = topic if not isinstance(topic, str) or len(topic) <= 60 else topic[:57] + "..."
        raise RecoveryError(f"invalid topic name {shown!r}: use 1 to {TOPIC_MAX} letters, digits, '.', "
                            "'_' or '-' (as Kafka's), other than '.' and '..'")
    return topic


def _check_id(value: str, pattern: re.Pattern[str], what: str) -> str:
    if len(value) > ID_MAX or not pattern.fullmatch(value):
        first = "a letter, a digit or '_'" if pattern is STREAM_ID else "a letter or a digit"
        raise ValueError(f"invalid {what} {value!r}: use {first}, then letters, digits, '_', '.' "
                         f"or '-' (at most {ID_MAX})")
    return value


class Grouping(str, Enum):
    SHUFFLE = "shuffle"
    FIELDS = "fields"
    ALL = "all"
    GLOBAL = "global"
    NONE = "none"
    DIRECT = "direct"
    LOCAL_OR_SHUFFLE = "local_or_shuffle"


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StreamDef(_Frozen):
    """An output stream a component declares (Storm's declareStream)."""
    id: str = DEFAULT_STREAM
    fields: tuple[str, ...] = ()
    direct: bool = False

    @field_validator("id")
    @classmethod
    def _stream_id(cls, v: str) -> str:
        return _check_id(v, STREAM_ID, "stream id")


class Input(_Frozen):
    """A subscription: `source` is the upstream component id (the XML's `from`)."""
    source: str
    stream: str = DEFAULT_STREAM
    grouping: Grouping = Grouping.SHUFFLE
    fields: tuple[str, ...] = ()   # only for the fields grouping


class ClassImpl(_Frozen):
    kind: Literal["class"] = "class"
    ref: str                       # "package.module:ClassName"


class ShellImpl(_Frozen):
    kind: Literal["shell"] = "shell"
    command: str
    script: str | None = None
    args: tuple[str, ...] = ()


class _ParamLookup:
    """`param(name)` over a built-in source's or sink's other XML attributes (its `params`)."""
    if TYPE_CHECKING:   # the models declare the field, in their own field order
        params: tuple[tuple[str, str], ...]

    @overload
    def param(self, name: str) -> str | None: ...
    @overload
    def param(self, name: str, default: str) -> str: ...

    def param(self, name: str, default: str | None = None) -> str | None:
        return dict(self.params).get(name, default)


class SourceImpl(_Frozen, _ParamLookup):
    """A built-in source (spouts only). `params` holds every other XML attribute; `options`
    the <option name= value=> children (a spark source's DataFrameReader options), in order."""
    kind: Literal["source"] = "source"
    type: str                      # file | redis-stream | spark | queue
    params: tuple[tuple[str, str], ...] = ()
    options: tuple[tuple[str, str], ...] = ()

    def option(self, name: str) -> str | None:
        return dict(self.options).get(name)


# A spark source (<source type="spark">): the attributes it takes; Spark's file formats, which
# read a path (or a table); the formats that read no path (their options name the data); and
# those whose rows have no stable position, so that their message ids must come from an
# id-field. Other formats (a package's, a Python data source) may take a path or not.
SPARK_SOURCE_ATTRIBUTES = ("format", "path", "table", "id-field", "schema")
SPARK_FILE_FORMATS = ("parquet", "orc", "csv", "json", "text", "avro", "xml", "binaryFile", "libsvm", "image")
SPARK_PATHLESS_FORMATS = ("jdbc", "kafka")
SPARK_UNORDERED_FORMATS = ("jdbc", "kafka")


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.\-]*:")


def is_uri(path: str) -> bool:
    """`s3://bucket/x`, `file:///x`, `hdfs://nn/x`: a location with a scheme, not a local path."""
    return bool(_URI.match(path)) and not os.path.isabs(path)


def resolve_path(path: str, base_dir: str | None) -> str:
    """A path of the workflow as the engine reads it: relative paths against the XML file's
    folder, absolute paths and URIs as written."""
    if is_uri(path) or os.path.isabs(path) or not base_dir:
        return path
    return os.path.join(base_dir, path)


def spark_id_fields(impl: SourceImpl) -> tuple[str, ...]:
    """The columns a spark source's id-field= names (one, or several separated by spaces: the
    message id is then the tuple of their values)."""
    return tuple((impl.param("id-field") or "").split())


@dataclass(frozen=True)
class SinkType:
    """What the model knows of a built-in sink type: the attributes its `<sink>` requires, its
    kind (`path`: part files in a folder; `table`: a user's table, only ever appended to;
    `stream`: a Redis key), and whether it can be a run's dead-letter sink."""
    required: tuple[str, ...]
    kind: Literal["path", "table", "stream"]
    dead_letters: bool = True


# The sink types, one entry each. connectors/sinks.py gives each its class (SINKS); the schema
# lists them (sinkTypeName, and deadLetterSinkTypeName those that take dead letters):
# tests/unit/connectors/test_sink_registry.py fails when the three disagree.
SINK_TYPES: dict[str, SinkType] = {
    "jsonl": SinkType(("path",), "path"),
    "parquet": SinkType(("path",), "path"),
    "redis": SinkType(("key",), "stream", dead_letters=False),
    "postgres": SinkType(("url", "table"), "table"),
    "delta": SinkType(("path",), "table"),
    "capture": SinkType((), "stream", dead_letters=False),
}
FILE_SINK_TYPES = tuple(name for name, t in SINK_TYPES.items() if t.kind == "path")
# Sinks into a user's table: always appended to (mode "append", the default, is the only one).
TABLE_SINK_TYPES = tuple(name for name, t in SINK_TYPES.items() if t.kind == "table")
# Spark's writer modes, for a file sink's folder when it already holds another run's parts:
# error refuses the submit, overwrite removes them once this run completes, append keeps them.
SinkMode = Literal["error", "overwrite", "append"]
SINK_MODES: tuple[str, ...] = ("error", "overwrite", "append")


class SinkImpl(_Frozen, _ParamLookup):
    """A built-in sink (bolts only). `params` holds every other XML attribute."""
    kind: Literal["sink"] = "sink"
    type: str                      # a key of SINK_TYPES
    mode: SinkMode | None = None   # file and table sinks; None (not written): see write_mode
    params: tuple[tuple[str, str], ...] = ()

    def write_mode(self, reads_topics: bool) -> SinkMode:
        """The mode= written, else the default: `append` for a table (a run never replaces a
        table's rows) and in a workflow that reads topics (a stream goes on from its committed
        offsets, run after run, into the same folder, as Structured Streaming's file sink
        appends), `error` for a file sink in one that reads files (a second run of the same
        input is refused rather than mixed with the first one's output)."""
        return self.mode or ("append" if reads_topics or self.type in TABLE_SINK_TYPES else "error")


Implementation = Annotated[ClassImpl | ShellImpl | SourceImpl | SinkImpl, Field(discriminator="kind")]


class Component(_Frozen):
    id: str
    kind: Literal["spout", "bolt"]
    parallelism: int = 1
    impl: Implementation
    streams: tuple[StreamDef, ...] = ()
    inputs: tuple[Input, ...] = ()            # bolts only
    config: tuple[tuple[str, str], ...] = ()  # component-level properties, override the workflow's

    @field_validator("id")
    @classmethod
    def _component_id(cls, v: str) -> str:
        return _check_id(v, COMPONENT_ID, "component id")

    @field_validator("parallelism")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError(f"parallelism must be at least 1, got {v}")
        return v

    def stream(self, stream_id: str) -> StreamDef | None:
        for s in self.streams:
            if s.id == stream_id:
                return s
        return None

    @property
    def is_spout(self) -> bool:
        return self.kind == "spout"


class Resources(_Frozen):
    """`<resources>`: files shipped with the workflow's code beyond what its components need
    (`include`: paths relative to the workflow's folder), and globs of files not to ship
    (`exclude`, matched against a file's relative path and its name)."""
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()


#: The components a workflow's dead-letter sink is written as (Workflow.with_dead_letter_sink):
#: a sink bolt, fed (on paper) by a spout whose stream has the dead letters' columns.
DEAD_LETTER_SINK_ID = "dead-letters"
DEAD_LETTER_SOURCE_ID = "dead-letter-source"


class Workflow(_Frozen):
    name: str
    config: tuple[tuple[str, str], ...] = ()
    resources: Resources = Resources()
    components: tuple[Component, ...] = ()
    # `<dead-letters><sink .../></dead-letters>`: where the run's dead letters are written
    # (exactly once, as any sink's parts); None: they stay in Redis
    dead_letters: SinkImpl | None = None
    # Folder that relative paths resolve against; not part of the XML.
    base_dir: str | None = Field(default=None, exclude=True)
    # Where an executor finds the workflow's code (classes, shell scripts) when it was shipped
    # with the job (model/code.py): set in the task, never stored. None: base_dir.
    code_dir: str | None = Field(default=None, exclude=True)

    @property
    def code_folder(self) -> str | None:
        """The folder classes are imported from and shell scripts run in."""
        return self.code_dir or self.base_dir

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        return _check_id(v, COMPONENT_ID, "workflow name")

    def to_task_json(self) -> str:
        """The workflow as Spark tasks and run records carry it: its JSON with `base_dir` (which
        model dumps and the XML leave out), so that relative paths resolve the same everywhere."""
        return json.dumps({**json.loads(self.model_dump_json()), "base_dir": self.base_dir})

    @classmethod
    def from_task_json(cls, text: str | bytes) -> Workflow:
        """The workflow `to_task_json` wrote, `base_dir` included."""
        return cls.model_validate_json(text)

    def component(self, component_id: str) -> Component:
        for c in self.components:
            if c.id == component_id:
                return c
        raise KeyError(component_id)

    def conf(self, component_id: str | None = None) -> dict[str, str]:
        """Effective configuration as text, as components receive it: declared defaults
        (recovery/model/config.py) < workflow properties < component properties."""
        merged = dict(config_decl.DEFAULTS)
        merged.update(dict(self.config))
        if component_id is not None:
            merged.update(dict(self.component(component_id).config))
        return merged

    def settings(self, component_id: str | None = None) -> config_decl.Settings:
        """The typed settings of `conf(component_id)` (recovery/model/config.py)."""
        return config_decl.settings(self.conf(component_id))

    def with_config(self, overrides: dict[str, str]) -> Workflow:
        """This workflow with workflow-level properties set or replaced (submit/recover -p)."""
        if not overrides:
            return self
        merged = dict(self.config)
        merged.update(overrides)
        return self.model_copy(update={"config": tuple(merged.items())})

    @property
    def reads_topics(self) -> bool:
        """Some spout reads a topic (`<source type="redis-stream">` or `<source type="kafka">`)."""
        return any(isinstance(c.impl, SourceImpl) and c.impl.type in ("redis-stream", "kafka") for c in self.spouts)

    def with_dead_letter_sink(self) -> Workflow:
        """This workflow with its dead-letter sink as a bolt (DEAD_LETTER_SINK_ID) reading the
        dead letters' columns (model/failed.py DEAD_LETTER_FIELDS), so that what checks, writes
        and clears the sinks of a workflow does the same for it. The workflow itself without a
        dead-letter sink."""
        if self.dead_letters is None:
            return self
        source = Component(id=DEAD_LETTER_SOURCE_ID, kind="spout",
                           impl=SourceImpl(type="queue", params=(("component", DEAD_LETTER_SINK_ID),)),
                           streams=(StreamDef(fields=DEAD_LETTER_FIELDS),))
        sink = Component(id=DEAD_LETTER_SINK_ID, kind="bolt", impl=self.dead_letters,
                         inputs=(Input(source=DEAD_LETTER_SOURCE_ID),))
        return self.model_copy(update={"components": (*self.components, source, sink)})

    @property
    def spouts(self) -> tuple[Component, ...]:
        return tuple(c for c in self.components if c.kind == "spout")

    @property
    def bolts(self) -> tuple[Component, ...]:
        return tuple(c for c in self.components if c.kind == "bolt")

    def check_config(self) -> None:
        """Every property, the workflow's and each component's, as at validate (a workflow built
        in code, or given properties in code as the test kit's `config=`): PropertyError naming
        the first bad one. See config.check_conf."""
        ids = [c.id for c in self.components]
        config_decl.check_conf(dict(self.config), ids)
        for c in self.components:
            try:
                config_decl.check_conf(dict(c.config), ids)
            except config_decl.PropertyError as err:
                raise config_decl.PropertyError(f"{c.kind} {c.id!r}: {err}", err.property) from None
