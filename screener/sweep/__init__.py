"""The sweep (`screener sweep`): ``job`` runs inside the Slurm job over the held nodes,
probed by ``step`` (one Slurm step); ``submit`` is `--submit` on the controller, with
``rolling`` (a few idle nodes due) and ``drained`` (screener-drained idle nodes, over SSH
from there); ``due`` soft-drains busy nodes no sweep reached; ``mode`` is what a sweep job
is given (its mode as arguments, the sbatch argv), shared by them all."""
