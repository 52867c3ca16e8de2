//! The budget of request bodies the proxy holds whole to swap an `inBody` secret: memory an agent
//! could otherwise make the server hold at will. All agents share `secret_body_budget_mb`; one
//! agent holds at most a quarter of it (at least one largest body), so a sandbox that opens
//! many such requests and sends them slowly cannot leave the others none; and a body must
//! arrive within `sandbox.egress.secret_body_timeout` of its request's headers, so no place is
//! held for ever.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::egress::substitute::MAX_BODY;

/// The budget is counted in these (a semaphore's permits are a `u32`).
const UNIT: usize = 1024;

/// Why a body got no place.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BudgetFull {
    #[error(
        "the proxy holds its most request bodies being rewritten for secrets ({0} MiB for all \
         agents, sandbox.egress.secret_body_budget_mb); try again shortly"
    )]
    All(usize),
    #[error(
        "this agent holds its share of request bodies being rewritten for secrets ({0} KiB: a \
         quarter of sandbox.egress.secret_body_budget_mb, at least 1 MiB); try again once one \
         was sent"
    )]
    Agent(usize),
}

pub struct BodyBudget {
    all: Arc<Semaphore>,
    budget: usize,
    /// Units each agent holds now; an agent holding none has no entry.
    held: Arc<Mutex<HashMap<String, usize>>>,
    share: usize,
}

/// A body's place in the budget, given back when it drops (once the body was sent, or the
/// request refused).
pub struct BodyPlace {
    _all: OwnedSemaphorePermit,
    held: Arc<Mutex<HashMap<String, usize>>>,
    agent: String,
    units: usize,
}

impl BodyBudget {
    pub fn new(budget: usize) -> BodyBudget {
        let units = (budget / UNIT).min(Semaphore::MAX_PERMITS);
        BodyBudget {
            all: Arc::new(Semaphore::new(units)),
            budget,
            held: Arc::default(),
            share: (units / 4).max(MAX_BODY / UNIT),
        }
    }

    /// A place for a body of at most `bytes` for `agent`, or why there is none now.
    pub fn take(&self, agent: &str, bytes: usize) -> Result<BodyPlace, BudgetFull> {
        let units = bytes.div_ceil(UNIT).max(1);
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let mine = held.get(agent).copied().unwrap_or(0);
        if mine + units > self.share {
            return Err(BudgetFull::Agent(self.share * UNIT / 1024));
        }
        let permits = u32::try_from(units).unwrap_or(u32::MAX);
        let Ok(all) = self.all.clone().try_acquire_many_owned(permits) else {
            return Err(BudgetFull::All(self.budget / (1024 * 1024)));
        };
        held.insert(agent.to_string(), mine + units);
        Ok(BodyPlace {
            _all: all,
            held: self.held.clone(),
            agent: agent.to_string(),
            units,
        })
    }
}

impl Drop for BodyPlace {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = held.get_mut(&self.agent) {
            *n = n.saturating_sub(self.units);
            if *n == 0 {
                held.remove(&self.agent);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn one_agent_holds_a_quarter_and_the_others_keep_the_rest() {
        let budget = BodyBudget::new(8 * MIB);
        let a: Vec<BodyPlace> = (0..2).map(|_| budget.take("a", MIB).unwrap()).collect();
        assert_eq!(budget.take("a", MIB).err(), Some(BudgetFull::Agent(2048)));
        let b: Vec<BodyPlace> = (0..2).map(|_| budget.take("b", MIB).unwrap()).collect();
        let c: Vec<BodyPlace> = (0..2).map(|_| budget.take("c", MIB).unwrap()).collect();
        let d: Vec<BodyPlace> = (0..2).map(|_| budget.take("d", MIB).unwrap()).collect();
        assert_eq!(budget.take("e", MIB).err(), Some(BudgetFull::All(8)));
        drop(a);
        assert!(budget.take("e", MIB).is_ok(), "a's places came back");
        assert!(budget.held.lock().unwrap().get("a").is_none());
        drop((b, c, d));
    }

    #[test]
    fn a_small_budget_still_lets_an_agent_hold_one_largest_body() {
        let budget = BodyBudget::new(2 * MIB);
        let first = budget.take("a", MAX_BODY).unwrap();
        assert!(matches!(budget.take("a", 1), Err(BudgetFull::Agent(_))));
        let other = budget.take("b", MAX_BODY).unwrap();
        drop((first, other));
        assert!(budget.held.lock().unwrap().is_empty());
    }

    #[test]
    fn a_place_is_at_least_one_unit() {
        let budget = BodyBudget::new(MIB);
        let places: Vec<BodyPlace> = (0..256).map(|_| budget.take("a", 0).unwrap()).collect();
        assert_eq!(places.len(), 256);
        assert_eq!(budget.held.lock().unwrap()["a"], 256);
    }
}
