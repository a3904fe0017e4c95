"""The Ray actors that host the parties: thin shells over the roles in :mod:`sifl_ray.roles`, so that a
Ray run and an in-process run execute the same code."""
