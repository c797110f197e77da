"""The layering rules of docs/ARCHITECTURE.md, checked on the imports themselves: the
runtime imports neither FastAPI nor SQLAlchemy nor the store nor the live path, and the API
talks to the runtime and the live path, never to the store (issue #16). The live path
(`app.live`) reads the store, the store never imports it, and neither imports the API: no
circle between the packages. Only `app.main` and `app.assembly`
assemble the store and the API. Inside the API, its rooms (rest, streams, ag_ui, http, ops,
openapi) import each other one way."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import ROOT


def imported_modules(package: str) -> dict[Path, set[str]]:
    found: dict[Path, set[str]] = {}
    for path in (ROOT / "app" / package).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module)
        found[path] = names
    return found


def offending(package: str, forbidden: tuple[str, ...]) -> list[str]:
    return [
        f"{path.relative_to(ROOT)} imports {name}"
        for path, names in imported_modules(package).items()
        for name in sorted(names)
        if any(name == f or name.startswith(f + ".") for f in forbidden)
    ]


def test_the_api_never_imports_the_store() -> None:
    assert offending("api", ("app.store", "sqlalchemy", "asyncpg")) == []


def test_the_runtime_imports_neither_http_nor_sql_nor_the_store() -> None:
    forbidden = (
        "app.store",
        "app.api",
        "app.live",
        "fastapi",
        "starlette",
        "sqlalchemy",
        "asyncpg",
    )
    assert offending("runtime", forbidden) == []


def test_the_store_never_imports_the_live_path_nor_the_api() -> None:
    """The store announces its commits (`app.store.announce`); the live path listens."""
    assert offending("store", ("app.live", "app.api", "fastapi", "starlette")) == []


def test_the_live_path_never_imports_the_api() -> None:
    """The API imports the live path (timelines, the stream response), never the reverse."""
    assert offending("live", ("app.api", "app.main", "fastapi")) == []


# `SessionRuntime`'s ports (`app.runtime.ports`): its attributes of these names are the
# ledger and run stores.
RUNTIME_STORES = ("ledger", "runs", "idempotency", "maintenance")
# What names a store in the API: the services' `stores`, or one of them.
API_STORES = ("store", "stores", "ledger")


def store_reads(package: str, *, through_runtime: bool) -> list[str]:
    """Store attribute reads in `package`, outside `app/runtime/session/service.py`: with
    `through_runtime`, `<...>runtime.<port>` for `SessionRuntime`'s ports; otherwise any
    `<x>.store`, `<x>.stores` or `<x>.ledger`."""
    found: list[str] = []
    names = RUNTIME_STORES if through_runtime else API_STORES
    for path in (ROOT / "app" / package).rglob("*.py"):
        if path.relative_to(ROOT).as_posix() == "app/runtime/session/service.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not (isinstance(node, ast.Attribute) and node.attr in names):
                continue
            owner = node.value
            name = owner.attr if isinstance(owner, ast.Attribute) else getattr(owner, "id", "")
            if not through_runtime or name == "runtime":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_the_session_runtime_is_the_only_ledger_store_caller() -> None:
    """`SessionRuntime` alone calls the ledger and run stores (its ports `LedgerPort`,
    `RunPort`, ...), so the state cache it keeps has one owner: runs, compaction, transfer
    and delegation write through it, and the API reaches no store at all. (Tenants,
    schedules and webhooks keep their own narrow ports: no state there.)"""
    assert store_reads("runtime", through_runtime=True) == []
    assert store_reads("api", through_runtime=False) == []


def test_routes_take_the_services_as_typed_dependencies() -> None:
    """No `<x>.app.state` in the API: routes get `Services` fields through the `Annotated`
    aliases of `app/api/http/deps.py`, and middlewares through `services_of` (docs/ARCHITECTURE.md,
    "Assembly")."""
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in (ROOT / "app" / "api").rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, ast.Attribute)
        and node.attr == "state"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "app"
    ]
    assert found == []


def api_room_imports() -> dict[str, set[str]]:
    """Which rooms of `app/api` (its folders: rest, streams, ag_ui, http, ...) each imports."""
    rooms: dict[str, set[str]] = {}
    for path, names in imported_modules("api").items():
        parts = path.relative_to(ROOT / "app" / "api").parts
        if len(parts) < 2:
            continue  # routes.py and __init__.py: above every room
        used = {n.split(".")[2] for n in names if n.startswith("app.api.") and n.count(".") >= 2}
        rooms.setdefault(parts[0], set()).update(used - {parts[0]})
    return rooms


def test_the_rooms_of_the_api_import_one_way() -> None:
    """The rooms of `app/api` (docs/ARCHITECTURE.md, "Layers") import each other one way
    only: `http` is under every room and imports none, and no two rooms reach each other."""
    rooms = api_room_imports()
    assert rooms["http"] == set()
    reached = {room: set(used) for room, used in rooms.items()}
    for _ in rooms:  # the transitive closure, one step per room
        for used in reached.values():
            used.update(*(reached.get(other, set()) for other in set(used)))
    assert [room for room, used in reached.items() if room in used] == []


def test_the_backend_is_chosen_in_one_place() -> None:
    """`app.store.stores.open_stores` picks the backend: it alone, outside the backend
    packages, imports their stores, and the backends never import it (no circle)."""
    backend_stores = tuple(
        f"app.store.{backend}.{module}"
        for backend in ("sqlite", "postgres")
        for module in ("database", "ledger", "runs", "idempotency", "cross_tenant")
    )
    inside = ("app/store/stores.py", "app/store/sqlite/", "app/store/postgres/")
    found = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path, names in imported_modules("").items()
        if not path.relative_to(ROOT).as_posix().startswith(inside)
        for name in sorted(names)
        if name in backend_stores
    ]
    assert found == []
    for backend in ("store/sqlite", "store/postgres"):
        assert offending(backend, ("app.store.stores",)) == []
