"""What the tests build on: a scripted model, a scripted HTTP server (and the other APIs'
reply shapes), a kernel frontend, a Jupyter server, inertness checks, shared tools."""
