"""The parts of running one screen, which app.py (the composition root) puts together:
the run's inputs, its transport, where its results go (store, spool, live marker), the
killed runs it finishes first, and its event loop with SIGTERM turned into a clean stop."""
