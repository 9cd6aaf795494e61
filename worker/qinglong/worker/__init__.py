"""Remote worker (claims attempts over HTTP, runs them, uploads logs): not built yet."""
