"""HTTP: FastAPI routers, auth, problem+json errors."""
