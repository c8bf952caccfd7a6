//! Weighted turns at a resource other than the device: whose waiter goes next, by the same
//! virtual-time rule as the fair policy ([`super::queue`]). tbfs uses it for writers waiting for
//! room in a pool the cleaner is emptying: there the turns at the commit path, not the device's
//! queue, decide how the room freed is shared, so each tenant's turns must follow its weight.
//!
//! Each tenant has a finish tag in virtual time. A waiter asking for work of cost `c` starts at
//! `max(V, the tenant's finish tag)` and finishes at `start + c / weight`; the waiter with the
//! smallest finish goes next, ties in arrival order. `V` is the start of the last waiter let
//! through, so a tenant that stopped asking comes back level with the others, with no credit for
//! the time it did not ask.
//!
//! As at the device (`Config::anticipation`), a tenant with one writer is never waiting while
//! its last turn's work is still going on, and a work-conserving choice would give it equal
//! turns whatever its weight. So the caller names the tenants it expects back soon, and the head
//! waits for them when one of them, asking for as much as last time, would finish first
//! ([`Turns::next`]).
//!
//! Pure: no clock, no locks, no I/O.

/// One waiter's place in a [`Turns`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Ticket(u64);

/// What goes next ([`Turns::next`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    /// This waiter.
    Go(Ticket),
    /// Nobody yet: an expected tenant would finish before every waiter.
    Wait,
    /// Nobody waits.
    Empty,
}

#[derive(Debug, Clone, Copy)]
struct Tenant<K> {
    key: K,
    /// Finish tag of its last waiter.
    tag: f64,
    /// Cost over weight of its last waiter: what it is expected to ask for next.
    last: f64,
}

/// Waiters for one resource and the tenants' tags ([`self`]).
#[derive(Debug)]
pub struct Turns<K> {
    /// Virtual time: the start tag of the last waiter let through.
    vtime: f64,
    tenants: Vec<Tenant<K>>,
    /// Waiting: ticket, key, start and finish tags.
    waiting: Vec<(Ticket, K, f64, f64)>,
    next: u64,
}

impl<K> Default for Turns<K> {
    fn default() -> Turns<K> {
        Turns {
            vtime: 0.0,
            tenants: Vec::new(),
            waiting: Vec::new(),
            next: 0,
        }
    }
}

impl<K: Copy + PartialEq> Turns<K> {
    pub fn new() -> Turns<K> {
        Turns::default()
    }

    fn tenant_mut(&mut self, key: K) -> &mut Tenant<K> {
        let i = match self.tenants.iter().position(|t| t.key == key) {
            Some(i) => i,
            None => {
                self.tenants.push(Tenant {
                    key,
                    tag: 0.0,
                    last: 0.0,
                });
                self.tenants.len() - 1
            }
        };
        &mut self.tenants[i]
    }

    /// A waiter of tenant `key` (of `weight`, 0 taken as 1) asks for work of `cost`; its ticket.
    /// Its tags are set now: a tenant with several waiters queues them one after the other.
    pub fn arrive(&mut self, key: K, weight: u32, cost: f64) -> Ticket {
        let vtime = self.vtime;
        let t = self.tenant_mut(key);
        let start = t.tag.max(vtime);
        t.last = cost.max(0.0) / f64::from(weight.max(1));
        let finish = start + t.last;
        t.tag = finish;
        let ticket = Ticket(self.next);
        self.next += 1;
        self.waiting.push((ticket, key, start, finish));
        ticket
    }

    /// The waiter with the smallest finish tag, the earliest arrival among equals.
    fn head_entry(&self) -> Option<&(Ticket, K, f64, f64)> {
        self.waiting
            .iter()
            .min_by(|a, b| a.3.total_cmp(&b.3).then(a.0.cmp(&b.0)))
    }

    /// The waiter that goes next if no tenant is expected back.
    pub fn head(&self) -> Option<Ticket> {
        self.head_entry().map(|w| w.0)
    }

    /// The waiter that goes next when the tenants `expected` (not waiting now) may ask again
    /// soon: the head, unless one of them, asking for as much as last time, would finish before
    /// it; then [`Next::Wait`].
    pub fn next(&self, expected: impl IntoIterator<Item = K>) -> Next {
        let Some(&(ticket, _, _, finish)) = self.head_entry() else {
            return Next::Empty;
        };
        let sooner = expected.into_iter().any(|key| {
            !self.waiting.iter().any(|w| w.1 == key)
                && self
                    .tenants
                    .iter()
                    .find(|t| t.key == key)
                    .is_some_and(|t| t.tag.max(self.vtime) + t.last < finish)
        });
        if sooner {
            Next::Wait
        } else {
            Next::Go(ticket)
        }
    }

    /// Lets `ticket` through (the head, or a waiter that gives up): it no longer waits, and the
    /// virtual time moves to its start if that is later.
    pub fn leave(&mut self, ticket: Ticket) {
        if let Some(i) = self.waiting.iter().position(|w| w.0 == ticket) {
            let (_, _, start, _) = self.waiting.swap_remove(i);
            if start > self.vtime {
                self.vtime = start;
            }
        }
    }

    /// How many waiters ever arrived.
    pub fn arrived(&self) -> u64 {
        self.next
    }

    /// How many wait.
    pub fn waiting(&self) -> usize {
        self.waiting.len()
    }
}

#[cfg(test)]
mod tests {
    use super::{Next, Turns};

    fn counts(order: &[usize], tenants: usize) -> Vec<usize> {
        (0..tenants)
            .map(|k| order.iter().filter(|&&o| o == k).count())
            .collect()
    }

    /// Every tenant has a waiter all the time (several writers each): `rounds` turns.
    fn backlogged(weights: &[u32], cost: impl Fn(usize) -> f64, rounds: usize) -> Vec<usize> {
        let mut turns = Turns::new();
        let mut tickets: Vec<_> = weights
            .iter()
            .enumerate()
            .map(|(k, &w)| turns.arrive(k, w, cost(k)))
            .collect();
        let mut order = Vec::new();
        for _ in 0..rounds {
            let Next::Go(head) = turns.next([]) else {
                panic!("every tenant waits")
            };
            let k = tickets
                .iter()
                .position(|&t| t == head)
                .expect("a known ticket");
            turns.leave(head);
            order.push(k);
            tickets[k] = turns.arrive(k, weights[k], cost(k));
        }
        order
    }

    #[test]
    fn two_tenants_2_to_1_waiting_for_room_are_let_through_2_to_1() {
        let order = backlogged(&[2, 1], |_| 256.0, 300);
        assert_eq!(counts(&order, 2), vec![200, 100]);
        // Not in bursts: every window of three turns holds two of the heavier tenant's.
        for w in order.windows(3) {
            assert_eq!(w.iter().filter(|&&k| k == 0).count(), 2, "{order:?}");
        }
    }

    #[test]
    fn turns_follow_weights_by_cost_not_by_count() {
        // 3:2:2:1, the lightest asking for twice as much per turn.
        let cost = |k: usize| if k == 3 { 512.0 } else { 256.0 };
        let order = backlogged(&[3, 2, 2, 1], cost, 1000);
        let c = counts(&order, 4);
        let got: Vec<f64> = c
            .iter()
            .enumerate()
            .map(|(k, &n)| n as f64 * cost(k))
            .collect();
        let total: f64 = got.iter().sum();
        for (k, w) in [3.0, 2.0, 2.0, 1.0].iter().enumerate() {
            let share = got[k] / total;
            assert!((share - w / 8.0).abs() < 0.01, "tenant {k}: {c:?}");
        }
    }

    /// One writer per tenant: a tenant asks again only once its last turn's work is done, the
    /// next step after its turn (its write goes out while the others' turns run). With `expect`
    /// the gate waits for a tenant whose turn is done and not yet back, as the caller does.
    fn one_writer_each(weights: &[u32], expect: bool, rounds: usize) -> Vec<usize> {
        let mut turns = Turns::new();
        let mut tickets: Vec<Option<_>> = weights
            .iter()
            .enumerate()
            .map(|(k, &w)| Some(turns.arrive(k, w, 256.0)))
            .collect();
        // The tenant whose turn ended last, not yet asking again.
        let mut away: Option<usize> = None;
        let mut order = Vec::new();
        while order.len() < rounds {
            let expected: Vec<usize> = away.filter(|_| expect).into_iter().collect();
            match turns.next(expected) {
                Next::Go(head) => {
                    let k = tickets
                        .iter()
                        .position(|&t| t == Some(head))
                        .expect("a known ticket");
                    turns.leave(head);
                    tickets[k] = None;
                    order.push(k);
                    // The one away comes back now; this one goes away.
                    if let Some(a) = away.replace(k) {
                        tickets[a] = Some(turns.arrive(a, weights[a], 256.0));
                    }
                }
                Next::Wait => {
                    let a = away.take().expect("waited for the one away");
                    tickets[a] = Some(turns.arrive(a, weights[a], 256.0));
                }
                Next::Empty => panic!("nobody waits"),
            }
        }
        order
    }

    #[test]
    fn one_writer_each_alternates_unless_the_one_away_is_expected() {
        // Work-conserving: whoever waits goes, so a single writer each gets equal turns.
        let order = one_writer_each(&[2, 1], false, 300);
        assert_eq!(counts(&order, 2), vec![150, 150]);
        // Waiting for the heavier tenant when it would finish first gives it its weight.
        let order = one_writer_each(&[2, 1], true, 300);
        assert_eq!(counts(&order, 2), vec![200, 100]);
        let order = one_writer_each(&[3, 2, 2, 1], true, 800);
        assert_eq!(counts(&order, 4), vec![300, 200, 200, 100]);
    }

    #[test]
    fn a_tenant_that_stopped_asking_comes_back_level_not_ahead() {
        let mut turns = Turns::new();
        // b alone for a while.
        for _ in 0..10 {
            let t = turns.arrive("b", 1, 10.0);
            turns.leave(t);
        }
        // a, idle until now, does not get ten turns in a row for the time it did not ask.
        let a = turns.arrive("a", 1, 10.0);
        let b = turns.arrive("b", 1, 10.0);
        assert_eq!(turns.head(), Some(a), "equal tags: the earlier arrival");
        turns.leave(a);
        let a = turns.arrive("a", 1, 10.0);
        assert_eq!(turns.head(), Some(b));
        turns.leave(b);
        assert_eq!(turns.next(["b"]), Next::Go(a), "b would not finish first");
        assert_eq!(turns.waiting(), 1);
    }
}
