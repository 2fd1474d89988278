//! Where a rank trains: its CPU, or one GPU, chosen from the launcher's local rank.

/// Where the model trains.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Device {
    /// This process's CPU (one thread computes, one communicates).
    #[default]
    Cpu,
    /// One NVIDIA GPU per process (needs the `cuda` feature); `gpu: None` is the MPI local rank.
    Cuda {
        /// The GPU's ordinal among those this process sees; `None`: the launcher's local rank
        /// ([`Device::gpu_ordinal`]).
        gpu: Option<usize>,
    },
}

impl Device {
    /// The GPU this rank uses: the one asked for, else its rank among the node's ranks (one
    /// process per GPU), as Open MPI's, MPICH's or Slurm's launcher numbers it. Where the launcher
    /// shows each rank its own GPU (`CUDA_VISIBLE_DEVICES` naming one), that GPU is 0 for every
    /// rank.
    pub fn gpu_ordinal(gpu: Option<usize>) -> usize {
        gpu.unwrap_or_else(|| gpu_of_local_rank(|name| std::env::var(name).ok()))
    }
}

/// The launchers' names for a process's rank among those of its node, in the order read.
const LOCAL_RANK_VARIABLES: &[&str] = &["OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"];

/// `Device::gpu_ordinal` without a choice, over the environment `var` reads.
fn gpu_of_local_rank(var: impl Fn(&str) -> Option<String>) -> usize {
    let one_visible = var("CUDA_VISIBLE_DEVICES").is_some_and(|v| !v.trim().is_empty() && !v.contains(','));
    if one_visible {
        return 0;
    }
    LOCAL_RANK_VARIABLES.iter().find_map(|name| var(name)?.trim().parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn each_launcher_s_local_rank_picks_the_gpu_unless_the_rank_sees_one() {
        assert_eq!(gpu_of_local_rank(env(&[])), 0);
        assert_eq!(gpu_of_local_rank(env(&[("OMPI_COMM_WORLD_LOCAL_RANK", "3")])), 3);
        assert_eq!(gpu_of_local_rank(env(&[("MPI_LOCALRANKID", "2")])), 2);
        assert_eq!(gpu_of_local_rank(env(&[("SLURM_LOCALID", "1")])), 1);
        assert_eq!(gpu_of_local_rank(env(&[("OMPI_COMM_WORLD_LOCAL_RANK", "1"), ("SLURM_LOCALID", "5")])), 1);
        assert_eq!(gpu_of_local_rank(env(&[("SLURM_LOCALID", "1"), ("CUDA_VISIBLE_DEVICES", "GPU-7f3a")])), 0);
        assert_eq!(gpu_of_local_rank(env(&[("SLURM_LOCALID", "1"), ("CUDA_VISIBLE_DEVICES", "0,1")])), 1);
        assert_eq!(Device::gpu_ordinal(Some(4)), 4);
    }
}
