"""A lookup by one column whose SQL Django compiles once, not on every call.

A person's answer or decision loads its card by the card's id, with the card's run and
project, before anything else the click does. Most of that load was Django compiling the
query, column by column and join by join, not the database: on this app's 2-core machine
it took 1.3 ms of a paced submit-answer, and 0.55 ms once compiled ahead
(bench/decision_path.py prints a decision's steps; docs/design-notes.md, "The card's load
compiled once").

``PreparedGet`` compiles its queryset once per database and thread (Django's compilers hold
their thread's connection), with a placeholder for the key, and then runs that SQL with the
key's value. The rows become objects exactly as Django's own ``ModelIterable`` makes them:
the same converters, ``from_db`` and ``select_related`` populators, from the same compiler,
the converters and populators found once with the SQL instead of for every load.
``PreparedRows`` does the same for a ``values_list`` query and returns every row, through
the same converters (a new card's look for the pending cards it supersedes).

Only what varies is the key, so the query must not depend on anything else that changes
between calls (the time, a setting): such a filter belongs after the load, in Python, or
in a query of its own.

``PreparedUpdate`` is the write that follows such a load: the first answer or decision
claims its pending card with ``filter(...).update(...)`` of a fixed set of columns, whose
compiling took 0.25 of its 0.41 ms (SQLite, 2 cores, idle). Its SQL is written once from
the model's columns, and the values go through the fields as ``update()`` sends them.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connections, router, transaction
from django.db.models import Field, Model, QuerySet
from django.db.models.query import get_related_populators
from django.db.models.sql.compiler import SQLCompiler

M = TypeVar("M", bound=Model)


@dataclass(frozen=True)
class _Objects:
    """How a row's values become the model's object, as ``ModelIterable`` builds it: its
    fields' slice of the row, ``from_db``, and the ``select_related`` populators."""

    model: type[Model]
    alias: str
    init_list: list[str]
    start: int
    end: int
    populators: list[Any]

    @classmethod
    def of(cls, compiler: SQLCompiler, alias: str) -> _Objects | None:
        select, klass_info = compiler.select, compiler.klass_info
        if klass_info is None:  # a values_list query: rows, no objects
            return None
        fields = klass_info["select_fields"]
        start, end = fields[0], fields[-1] + 1
        init_list = [column[0].target.attname for column in select[start:end]]
        # Django 5.2's takes these three; the stubs describe 6.x's.
        populators = get_related_populators(klass_info, select, alias)  # type: ignore[call-arg]
        return cls(klass_info["model"], alias, init_list, start, end, populators)

    def build(self, values: list[Any]) -> Any:
        obj = self.model.from_db(self.alias, self.init_list, values[self.start : self.end])
        for populator in self.populators:
            populator.populate(values, obj)
        return obj


@dataclass(frozen=True)
class _Compiled:
    """One thread's compiled query: its SQL and parameters, where the key goes, and what
    turns a row into values and an object. Django works those out column by column for
    every queryset (the converters, the ``select_related`` populators); here they are
    found once, with the SQL."""

    sql: str
    params: tuple[Any, ...]
    key_index: int
    compiler: SQLCompiler
    converters: dict[int, Any]
    # A composite primary key among the columns: Django's own path turns rows into values.
    composite: bool
    objects: _Objects | None

    @classmethod
    def of(
        cls, compiler: SQLCompiler, alias: str, sql: str, params: tuple[Any, ...], key_index: int
    ) -> _Compiled:
        columns = [column[0] for column in compiler.select[0 : compiler.col_count]]
        converters = compiler.get_converters(columns)
        composite = compiler.has_composite_fields(columns)
        return cls(sql, params, key_index, compiler, converters, composite, _Objects.of(compiler, alias))

    def values(self, rows: list[Any]) -> list[Any]:
        """The rows' values through the converters, as ``results_iter`` gives them."""
        if self.composite:
            return list(self.compiler.results_iter(results=[rows]))
        if not self.converters:
            return rows
        return list(self.compiler.apply_converters(rows, self.converters))


class _Prepared(Generic[M]):
    """``queryset().filter(**{key: value})``, compiled once per database and thread.

    ``placeholder``: a value of the key's type that equals no other parameter of the
    query; it marks the key's place in the compiled SQL.
    """

    def __init__(self, queryset: Callable[[], QuerySet[M, Any]], key: str, placeholder: Any) -> None:
        self._queryset = queryset
        self._key = key
        self._placeholder = placeholder
        self._local = threading.local()

    @functools.cached_property
    def model(self) -> type[M]:
        return self._queryset().model

    @functools.cached_property
    def key_field(self) -> Field[Any, Any]:
        field = self.model._meta.get_field(self._key)
        assert isinstance(field, Field)
        return field

    def _compiled(self, alias: str) -> _Compiled:
        by_alias: dict[str, _Compiled] = self._local.__dict__.setdefault("by_alias", {})
        if alias not in by_alias:
            by_alias[alias] = self._compile(alias)
        return by_alias[alias]

    def _compile(self, alias: str) -> _Compiled:
        compiler = self._queryset().filter(**{self._key: self._placeholder}).query.get_compiler(using=alias)
        sql, params = compiler.as_sql()
        marker = self.key_field.get_db_prep_value(self._placeholder, compiler.connection, prepared=False)
        found = [index for index, param in enumerate(params) if param == marker]
        if len(found) != 1:
            raise ValueError(f"the placeholder for {self._key!r} is not one parameter of: {sql}")
        return _Compiled.of(compiler, alias, sql, tuple(params), found[0])

    def _run(self, value: Any, *, limit: int | None) -> tuple[_Compiled, list[Any]]:
        """The compiled query and its raw rows for ``value`` (``limit`` at most)."""
        key = self.key_field
        alias = router.db_for_read(self.model)
        compiled = self._compiled(alias)
        connection = connections[alias]
        params = list(compiled.params)
        params[compiled.key_index] = key.get_db_prep_value(key.to_python(value), connection, prepared=False)
        with connection.cursor() as cursor:
            cursor.execute(compiled.sql, params)
            rows = cursor.fetchall() if limit is None else cursor.fetchmany(limit)
        return compiled, rows


class PreparedGet(_Prepared[M]):
    """``queryset().get(**{key: value})`` (its ``select_related`` and ``only`` included),
    compiled once; ``get`` raises ``DoesNotExist`` as Django's does."""

    def get(self, value: Any) -> M:
        model = self.model
        compiled, rows = self._run(value, limit=2)
        name = model._meta.object_name
        if not rows:
            missing = f"{name} matching {self._key}={value!r} does not exist."
            raise model.DoesNotExist(missing)  # type: ignore[attr-defined]
        if len(rows) > 1:
            several = f"more than one {name} with {self._key}={value!r}"
            raise model.MultipleObjectsReturned(several)  # type: ignore[attr-defined]
        assert compiled.objects is not None  # a model's queryset
        [values] = compiled.values(rows)
        built: M = compiled.objects.build(values)
        return built


class PreparedRows(_Prepared[M]):
    """``queryset().filter(**{key: value})`` of a ``values_list`` queryset, compiled once;
    ``rows`` gives every row as a tuple of its values, through the fields' converters."""

    def rows(self, value: Any) -> list[tuple[Any, ...]]:
        compiled, rows = self._run(value, limit=None)
        return [tuple(row) for row in compiled.values(rows)]


class PreparedUpdate(Generic[M]):
    """``model.objects.filter(...).update(...)`` of the columns ``fields``, written once.

    ``where`` is the filter: each a field's name and its comparison (``=``, ``<``, ``>``,
    ``<=``, ``>=``), joined by AND, as ``filter(pk=…, status=…, expires_at__gt=…)``.
    What is set goes through each field as ``update()`` sends it (a related object as its
    key, then ``get_db_prep_save``); the filter's values through ``get_db_prep_value``, as
    a lookup's. No expressions (``F()``): such an update is Django's to compile.
    """

    COMPARISONS = frozenset({"=", "<", ">", "<=", ">="})

    def __init__(self, model: type[M], fields: tuple[str, ...], where: tuple[tuple[str, str], ...]) -> None:
        self.model = model
        self.fields = [self._column(name) for name in fields]
        self.where = [(self._column(name), op) for name, op in where]
        if any(op not in self.COMPARISONS for _field, op in self.where):
            raise ValueError(f"comparisons are {sorted(self.COMPARISONS)}: {where}")
        self._sql_by_alias: dict[str, str] = {}

    def _column(self, name: str) -> Field[Any, Any]:
        meta = self.model._meta
        field = meta.pk if name == "pk" else meta.get_field(name)
        if not isinstance(field, Field) or not field.concrete or field.many_to_many or not field.column:
            raise ValueError(f"{self.model.__name__}.{name}: not a column an update can set or filter on")
        if hasattr(field, "get_placeholder"):  # a field whose SQL is more than %s
            raise ValueError(f"{self.model.__name__}.{name}: its value needs Django's compiler")
        return field

    def _sql(self, alias: str) -> str:
        if alias not in self._sql_by_alias:
            quote = connections[alias].ops.quote_name
            assignments = ", ".join(f"{quote(str(field.column))} = %s" for field in self.fields)
            conditions = " AND ".join(f"{quote(str(field.column))} {op} %s" for field, op in self.where)
            table = quote(self.model._meta.db_table)
            self._sql_by_alias[alias] = f"UPDATE {table} SET {assignments} WHERE {conditions}"
        return self._sql_by_alias[alias]

    def update(self, values: dict[str, Any], *where: Any) -> int:
        """Set ``values`` (every one of ``fields``, by name) where ``where`` (in its order)
        holds; the number of rows updated."""
        alias = router.db_for_write(self.model)
        connection = connections[alias]
        params = []
        for field in self.fields:
            value = values[field.name]
            if hasattr(value, "prepare_database_save"):  # a model instance, for a relation
                value = value.prepare_database_save(field)
            params.append(field.get_db_prep_save(value, connection))
        for (field, _op), value in zip(self.where, where, strict=True):
            params.append(field.get_db_prep_value(value, connection, prepared=False))
        # As update(): an error inside a transaction leaves it to be rolled back.
        with transaction.mark_for_rollback_on_error(using=alias), connection.cursor() as cursor:
            cursor.execute(self._sql(alias), params)
            return int(cursor.rowcount)
