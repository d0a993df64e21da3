"""Local stand-ins for the registry's base images (``python:*-slim``, ``nvidia/cuda:*``), made
where no registry can be reached: ``imagegen standins``.

plan.py (pure: which images, their tags from the catalog, what to remake), mirrors.py (the
host's Debian archive from apt's sources), rootfs.py (debootstrap), cuda_home.py (CUDA 13.x
homes), debian_cuda.py (CUDA 12.4 from Debian trixie), engine.py (the docker commands) and
make.py (runs the recipes, returns a report).
"""
