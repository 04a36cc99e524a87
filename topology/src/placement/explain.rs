//! Why a gang went where it went: the cost of the answer, term by term, and for the levels
//! below and the domains beside the chosen one, why they lost.

use std::fmt;

use super::cost::CostBreakdown;
use super::exact::{self, domains_at};
use super::greedy;
use super::{CostModel, Placement, PlacementFailure, PlacementPolicy, PlacementRequest, Scratch, SearchPath};
use crate::{DomainId, Resources, Topology};

/// Rivals listed per kind before the rest are summarised.
const SHOWN: usize = 8;

/// A placement with the reasons behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Explanation {
    /// The policy that chose.
    pub policy: PlacementPolicy,
    /// What it chose.
    pub placement: Placement,
    /// The chosen placement's cost, term by term.
    pub breakdown: CostBreakdown,
    /// Levels below the chosen one, innermost first: why none of their domains was used.
    pub deeper: Vec<LevelVerdict>,
    /// Level name of the chosen domain (`cluster` for the root).
    pub level: String,
    /// Domains at the chosen level, the chosen one first.
    pub rivals: Vec<Rival>,
    /// Domains at that level not listed.
    pub unlisted: usize,
}

/// Why no domain of one level below the chosen one holds the gang.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LevelVerdict {
    /// No domain there is big enough; the roomiest one is named.
    TooSmall {
        /// Level name.
        level: String,
        /// Path of the roomiest domain.
        roomiest: String,
        /// Pods it could take.
        pods: u64,
        /// Pods the gang has.
        need: u64,
    },
    /// A domain there holds the gang but costs more than the chosen answer.
    Costlier {
        /// Level name.
        level: String,
        /// Path of the cheapest such domain.
        domain: String,
        /// Its best cost.
        cost: u64,
    },
}

/// One domain at the chosen level.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rival {
    /// Its path.
    pub path: String,
    /// Pods of the gang it could take (whole slices counted).
    pub pods: u64,
    /// The cheapest cost of holding the whole gang there, when it can.
    pub best_cost: Option<u64>,
    /// Whether the policy chose it.
    pub chosen: bool,
}

/// Places a gang with `policy` and explains the answer.
pub(crate) fn explain(
    topo: &Topology,
    free: &[Resources],
    request: &PlacementRequest,
    policy: PlacementPolicy,
    model: &CostModel,
    scratch: &mut Scratch,
) -> Result<Explanation, PlacementFailure> {
    let placement = super::place(topo, free, request, policy, model, scratch)?;
    let breakdown = model.breakdown(topo, free, request.pod, &placement.per_host());
    let units = greedy::count(topo, free, request, &mut scratch.greedy)?;
    let fits = scratch.greedy.fits.clone();
    let pods_at = |d: DomainId| fits[d.0 as usize] * units.pods_per_unit(topo.depth(d));
    let mut costs_at = |depth: u8| {
        exact::domain_costs(topo, free, request, model, &scratch.greedy, &mut scratch.exact, depth).unwrap_or_default()
    };
    let mut deeper = Vec::new();
    for depth in (placement.depth + 1..=topo.host_depth()).rev() {
        let level = topo.levels()[usize::from(depth) - 1].clone();
        let costs = costs_at(depth);
        if let Some(&(d, cost)) = costs.iter().min_by_key(|&&(d, c)| (c, d)) {
            deeper.push(LevelVerdict::Costlier { level, domain: topo.path(d), cost });
        } else if let Some(d) =
            domains_at(topo, &fits, depth).max_by_key(|&d| (fits[d.0 as usize], std::cmp::Reverse(d)))
        {
            deeper.push(LevelVerdict::TooSmall {
                level,
                roomiest: topo.path(d),
                pods: pods_at(d),
                need: u64::from(request.pods),
            });
        }
    }
    let costs = costs_at(placement.depth);
    let mut rivals: Vec<Rival> = domains_at(topo, &fits, placement.depth)
        .map(|d| Rival {
            path: topo.path(d),
            pods: pods_at(d),
            best_cost: costs.iter().find(|(x, _)| *x == d).map(|&(_, c)| c),
            chosen: d == placement.domain,
        })
        .collect();
    rivals.sort_by_key(|r| (!r.chosen, r.best_cost.is_none(), r.best_cost, std::cmp::Reverse(r.pods)));
    let mut shown: Vec<Rival> = rivals.iter().filter(|r| r.best_cost.is_some()).take(SHOWN).cloned().collect();
    shown.extend(rivals.iter().filter(|r| r.best_cost.is_none()).take(SHOWN / 2).cloned());
    let unlisted = rivals.len() - shown.len();
    Ok(Explanation {
        policy,
        level: topo.level_name(placement.domain).to_string(),
        placement,
        breakdown,
        deeper,
        rivals: shown,
        unlisted,
    })
}

impl Explanation {
    /// How the policy chooses, in one line.
    pub fn rule(&self) -> &'static str {
        match (self.policy, self.placement.path) {
            (PlacementPolicy::Trainyard, SearchPath::Exact) => {
                "exact tree search: the cheapest placement under the cost model (it beat the greedy answer)"
            }
            (PlacementPolicy::Trainyard, _) => {
                "greedy answer, proven optimal under the cost model (by a lower bound or the exact tree search)"
            }
            (PlacementPolicy::Greedy, _) => "greedy: the lowest level that holds the gang, the tightest domain there",
            (PlacementPolicy::FirstFit, _) => "first fit: hosts in declaration order, topology ignored",
            (PlacementPolicy::KueueBestFit, _) => {
                "Kueue BestFit: the tightest domain of the requested level, else domains in order of size"
            }
            (PlacementPolicy::SlurmTree, _) => "Slurm tree: the lowest switch that fits, then best-fit leaf switches",
        }
    }
}

impl fmt::Display for Explanation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "why this placement ({}): {}", self.policy, self.rule())?;
        writeln!(f, "  cost {}", self.breakdown)?;
        if let Some(gap) = self.placement.gap() {
            writeln!(f, "  optimality gap {gap} (lower bound {})", self.placement.lower_bound.unwrap_or_default())?;
        }
        for verdict in &self.deeper {
            match verdict {
                LevelVerdict::TooSmall { level, roomiest, pods, need } => {
                    writeln!(f, "  no {level} holds {need} pods: the roomiest, {roomiest}, takes {pods}")?
                }
                LevelVerdict::Costlier { level, domain, cost } => writeln!(
                    f,
                    "  {level} {domain} holds the gang but costs at least {cost} (+{})",
                    cost.saturating_sub(self.placement.cost)
                )?,
            }
        }
        if self.level != "cluster" {
            writeln!(f, "  {} domains at level {}:", self.rivals.len() + self.unlisted, self.level)?;
            for r in &self.rivals {
                let note = match (r.chosen, r.best_cost) {
                    (true, _) => format!("chosen, cost {}", self.placement.cost),
                    (false, Some(c)) if c < self.placement.cost => {
                        format!("could cost {c} (-{}); not this policy's pick", self.placement.cost - c)
                    }
                    (false, Some(c)) if c == self.placement.cost => format!("same cost {c}; lower index wins"),
                    (false, Some(c)) => format!("costs at least {c} (+{})", c - self.placement.cost),
                    (false, None) => format!("too small for {} pods", self.placement.hosts.len()),
                };
                writeln!(f, "    {:<28} {:>6} pods fit   {note}", r.path, r.pods)?;
            }
            if self.unlisted > 0 {
                writeln!(f, "    ... and {} more", self.unlisted)?;
            }
        }
        Ok(())
    }
}
