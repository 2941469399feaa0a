"""Each service's decisions as a pure core: every read is an argument, nothing does I/O.
The service (the shell) reads what a core asks for, and writes what it returns."""
