//! Resource vectors: what a pod asks for and what a node or domain has free.

use std::fmt;

use serde::{Deserialize, Serialize};

/// An amount of each schedulable resource. All arithmetic is checked or
/// saturating so that capacity can never silently wrap below zero.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Resources {
    /// Whole GPUs.
    #[serde(default)]
    pub gpus: u64,
    /// CPU in thousandths of a core (Kubernetes millicores).
    #[serde(default)]
    pub cpu_milli: u64,
    /// Memory in MiB.
    #[serde(default)]
    pub memory_mib: u64,
}

impl Resources {
    /// No resources at all.
    pub const ZERO: Resources = Resources { gpus: 0, cpu_milli: 0, memory_mib: 0 };

    /// Only GPUs.
    pub const fn gpus(gpus: u64) -> Self {
        Resources { gpus, cpu_milli: 0, memory_mib: 0 }
    }

    /// True when every component is zero.
    pub fn is_zero(&self) -> bool {
        *self == Self::ZERO
    }

    /// True when `self` has at least `other` in every component.
    pub fn covers(&self, other: &Resources) -> bool {
        self.gpus >= other.gpus && self.cpu_milli >= other.cpu_milli && self.memory_mib >= other.memory_mib
    }

    /// Component-wise sum; `None` on overflow.
    pub fn checked_add(&self, other: &Resources) -> Option<Resources> {
        Some(Resources {
            gpus: self.gpus.checked_add(other.gpus)?,
            cpu_milli: self.cpu_milli.checked_add(other.cpu_milli)?,
            memory_mib: self.memory_mib.checked_add(other.memory_mib)?,
        })
    }

    /// Component-wise difference; `None` if any component would go negative.
    pub fn checked_sub(&self, other: &Resources) -> Option<Resources> {
        Some(Resources {
            gpus: self.gpus.checked_sub(other.gpus)?,
            cpu_milli: self.cpu_milli.checked_sub(other.cpu_milli)?,
            memory_mib: self.memory_mib.checked_sub(other.memory_mib)?,
        })
    }

    /// Component-wise product with a count; `None` on overflow.
    pub fn checked_mul(&self, n: u64) -> Option<Resources> {
        Some(Resources {
            gpus: self.gpus.checked_mul(n)?,
            cpu_milli: self.cpu_milli.checked_mul(n)?,
            memory_mib: self.memory_mib.checked_mul(n)?,
        })
    }

    /// Component-wise difference, each component at least zero.
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            gpus: self.gpus.saturating_sub(other.gpus),
            cpu_milli: self.cpu_milli.saturating_sub(other.cpu_milli),
            memory_mib: self.memory_mib.saturating_sub(other.memory_mib),
        }
    }

    /// Component-wise sum, each component at most `u64::MAX`.
    pub fn saturating_add(&self, other: &Resources) -> Resources {
        Resources {
            gpus: self.gpus.saturating_add(other.gpus),
            cpu_milli: self.cpu_milli.saturating_add(other.cpu_milli),
            memory_mib: self.memory_mib.saturating_add(other.memory_mib),
        }
    }

    /// Component-wise minimum.
    pub fn component_min(&self, other: &Resources) -> Resources {
        Resources {
            gpus: self.gpus.min(other.gpus),
            cpu_milli: self.cpu_milli.min(other.cpu_milli),
            memory_mib: self.memory_mib.min(other.memory_mib),
        }
    }

    /// Component-wise maximum.
    pub fn component_max(&self, other: &Resources) -> Resources {
        Resources {
            gpus: self.gpus.max(other.gpus),
            cpu_milli: self.cpu_milli.max(other.cpu_milli),
            memory_mib: self.memory_mib.max(other.memory_mib),
        }
    }

    /// How many copies of `pod` fit into `self`. A pod that asks for
    /// nothing fits `u64::MAX` times; callers reject such pods up front.
    pub fn fit_count(&self, pod: &Resources) -> u64 {
        let mut n = u64::MAX;
        for (free, want) in [(self.gpus, pod.gpus), (self.cpu_milli, pod.cpu_milli), (self.memory_mib, pod.memory_mib)]
        {
            if let Some(fits) = free.checked_div(want) {
                n = n.min(fits);
            }
        }
        n
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} GPU", self.gpus)?;
        if self.cpu_milli > 0 {
            if self.cpu_milli.is_multiple_of(1000) {
                write!(f, ", {} CPU", self.cpu_milli / 1000)?;
            } else {
                write!(f, ", {}m CPU", self.cpu_milli)?;
            }
        }
        if self.memory_mib > 0 {
            write!(f, ", {} MiB", self.memory_mib)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_count_takes_the_scarcest_resource() {
        let free = Resources { gpus: 8, cpu_milli: 10_000, memory_mib: 0 };
        let pod = Resources { gpus: 2, cpu_milli: 4_000, memory_mib: 0 };
        assert_eq!(free.fit_count(&pod), 2);
    }

    #[test]
    fn checked_sub_refuses_to_go_negative() {
        assert_eq!(Resources::gpus(1).checked_sub(&Resources::gpus(2)), None);
        assert_eq!(Resources::gpus(3).checked_sub(&Resources::gpus(2)), Some(Resources::gpus(1)));
    }

    #[test]
    fn display_is_compact() {
        let r = Resources { gpus: 8, cpu_milli: 64_000, memory_mib: 512 };
        assert_eq!(r.to_string(), "8 GPU, 64 CPU, 512 MiB");
        assert_eq!(Resources { gpus: 0, cpu_milli: 500, memory_mib: 0 }.to_string(), "0 GPU, 500m CPU");
    }
}
