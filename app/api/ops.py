"""Operations routes: liveness and readiness."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse

router = APIRouter(tags=["operations"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict:
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: the database answers")
async def readyz(request: Request) -> JSONResponse:
    try:
        await request.app.state.store.ping()
    except Exception as exc:  # any failure means not ready; the reason is for operators
        return JSONResponse(
            {"status": "unavailable", "reason": type(exc).__name__}, status_code=503
        )
    return JSONResponse({"status": "ok"})
