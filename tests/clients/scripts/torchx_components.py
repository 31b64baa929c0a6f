"""A TorchX component whose entrypoint is ``accel launch``, with the ``PET_*`` variables
TorchX's macros fill in for each replica (as its Kubernetes jobs carry them): the
replica's rank, the app id as the rendezvous id. TorchX's local scheduler adds
``PET_LOG_DIR`` itself."""

import torchx.specs as specs


def accel_ddp(*script_args: str, script: str, nnodes: int = 2, port: int = 29500) -> specs.AppDef:
    """``nnodes`` replicas, each ``accel launch --cpu SCRIPT ARGS`` with one worker."""
    return specs.AppDef(
        name="accel-ddp",
        roles=[
            specs.Role(
                name="trainer",
                image=".",
                entrypoint="accel",
                args=["launch", "--cpu", script, *script_args],
                env={
                    "PET_NNODES": str(nnodes),
                    "PET_NPROC_PER_NODE": "1",
                    "PET_NODE_RANK": specs.macros.replica_id,
                    "PET_RDZV_ENDPOINT": f"localhost:{port}",
                    "PET_RDZV_ID": specs.macros.app_id,
                },
                num_replicas=nnodes,
            )
        ],
    )
