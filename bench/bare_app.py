"""The HTTP baseline: a bare FastAPI POST endpoint returning a constant, served by uvicorn
exactly as `asr serve` serves the service (one process, same loop and HTTP parser choice,
no access log). `python -m bench.bare_app PORT`."""

from __future__ import annotations

import sys

import uvicorn
from fastapi import FastAPI

app = FastAPI()


@app.post("/run")
async def run() -> dict[str, str]:
    return {"status": "finished", "output": "echo: hello"}


if __name__ == "__main__":
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning", access_log=False)
