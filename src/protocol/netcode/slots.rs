//! The server's client slots: which address and client id hold which slot, inside the
//! [`Endpoint`](super::server::Endpoint).

use std::collections::HashMap;
use std::net::SocketAddr;

use super::server::Occupancy;

/// A filled slot.
#[derive(Debug, Clone)]
pub struct Occupant<T> {
    /// The client's address.
    pub addr: SocketAddr,
    /// The client's id.
    pub client_id: u64,
    /// What the owner keeps for it.
    pub value: T,
}

/// A fixed number of slots, looked up by index, address or client id.
#[derive(Debug, Clone)]
pub struct SlotTable<T> {
    entries: Vec<Option<Occupant<T>>>,
    by_addr: HashMap<SocketAddr, usize>,
    by_id: HashMap<u64, usize>,
    free: Vec<usize>,
    filled: usize,
}

impl<T> SlotTable<T> {
    /// `capacity` empty slots; the lowest index is handed out first.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: (0..capacity).map(|_| None).collect(),
            // The maps grow as clients arrive: a server sized for thousands that has a few
            // pays for a few.
            by_addr: HashMap::new(),
            by_id: HashMap::new(),
            free: (0..capacity).rev().collect(),
            filled: 0,
        }
    }

    /// Takes a free slot to fill later (with [`SlotTable::fill`] or [`SlotTable::unreserve`]).
    pub fn reserve(&mut self) -> Option<usize> {
        self.free.pop()
    }

    /// Gives back a reserved slot that was not filled.
    pub fn unreserve(&mut self, index: usize) {
        if self.entries.get(index).is_some_and(Option::is_none) && !self.free.contains(&index) {
            self.free.push(index);
        }
    }

    /// Fills a reserved slot. A client id another slot holds is this one's from now on (the
    /// newer connection of that client); the other keeps its address until it is removed.
    pub fn fill(&mut self, index: usize, addr: SocketAddr, client_id: u64, value: T) {
        if let Some(e) = self.entries.get_mut(index) {
            if e.is_none() {
                self.filled += 1;
            }
            *e = Some(Occupant { addr, client_id, value });
            self.by_addr.insert(addr, index);
            self.by_id.insert(client_id, index);
        }
    }

    /// Moves a filled slot to `addr` (its client's connection came back from there): from now
    /// on datagrams from `addr` are routed to it, and none from its old address.
    pub fn readdress(&mut self, index: usize, addr: SocketAddr) -> Option<&mut Occupant<T>> {
        let o = self.entries.get_mut(index)?.as_mut()?;
        if self.by_addr.get(&o.addr) == Some(&index) {
            self.by_addr.remove(&o.addr);
        }
        o.addr = addr;
        self.by_addr.insert(addr, index);
        self.by_id.insert(o.client_id, index);
        Some(o)
    }

    /// Empties a slot. Its client id stays with another slot that took it over (a newer
    /// connection of the same client, filled before this one was removed).
    pub fn remove(&mut self, index: usize) -> Option<Occupant<T>> {
        let o = self.entries.get_mut(index)?.take()?;
        if self.by_addr.get(&o.addr) == Some(&index) {
            self.by_addr.remove(&o.addr);
        }
        if self.by_id.get(&o.client_id) == Some(&index) {
            self.by_id.remove(&o.client_id);
        }
        self.free.push(index);
        self.filled -= 1;
        Some(o)
    }

    /// The slot of an address.
    pub fn slot_of(&self, addr: &SocketAddr) -> Option<usize> {
        self.by_addr.get(addr).copied()
    }

    /// The slot of a client id.
    pub fn slot_of_id(&self, client_id: u64) -> Option<usize> {
        self.by_id.get(&client_id).copied()
    }

    /// A filled slot.
    pub fn get(&self, index: usize) -> Option<&Occupant<T>> {
        self.entries.get(index)?.as_ref()
    }

    /// A filled slot, mutably.
    pub fn get_mut(&mut self, index: usize) -> Option<&mut Occupant<T>> {
        self.entries.get_mut(index)?.as_mut()
    }

    /// Filled slots (a replaced connection still ending counts beside its replacement).
    pub fn len(&self) -> usize {
        self.filled
    }

    /// Addresses routed to a filled slot (as many as filled slots, unless a leak).
    pub fn addresses(&self) -> usize {
        self.by_addr.len()
    }

    /// Whether no slot is filled.
    pub fn is_empty(&self) -> bool {
        self.filled == 0
    }

    /// All slots, filled or not.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Filled slots with their indexes, mutably.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (usize, &mut Occupant<T>)> {
        self.entries.iter_mut().enumerate().filter_map(|(i, e)| Some((i, e.as_mut()?)))
    }

    /// Filled slots with their indexes.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Occupant<T>)> {
        self.entries.iter().enumerate().filter_map(|(i, e)| Some((i, e.as_ref()?)))
    }
}

impl<T> Occupancy for SlotTable<T> {
    fn addr_connected(&self, addr: &SocketAddr) -> bool {
        self.by_addr.contains_key(addr)
    }
    fn client_at(&self, addr: &SocketAddr) -> Option<u64> {
        self.get(*self.by_addr.get(addr)?).map(|o| o.client_id)
    }
    fn id_connected(&self, client_id: u64) -> bool {
        self.by_id.contains_key(&client_id)
    }
    fn is_full(&self) -> bool {
        self.free.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_found_by_address_and_id_and_reused() {
        let a: SocketAddr = "127.0.0.1:1".parse().unwrap();
        let b: SocketAddr = "127.0.0.1:2".parse().unwrap();
        let mut t = SlotTable::new(2);
        let i = t.reserve().unwrap();
        assert_eq!(i, 0);
        t.fill(i, a, 7, "x");
        let j = t.reserve().unwrap();
        t.fill(j, b, 8, "y");
        assert!(t.is_full() && t.reserve().is_none());
        assert_eq!((t.slot_of(&b), t.slot_of_id(7), t.len()), (Some(1), Some(0), 2));
        assert!(t.addr_connected(&a) && t.id_connected(8));
        assert_eq!(t.remove(0).map(|o| o.value), Some("x"));
        assert!(!t.addr_connected(&a) && !t.id_connected(7) && !t.is_full());
        let k = t.reserve().unwrap();
        t.unreserve(k);
        assert_eq!(t.reserve(), Some(0), "an unfilled reservation goes back");
        let c: SocketAddr = "127.0.0.1:3".parse().unwrap();
        assert_eq!(t.readdress(1, c).map(|o| o.value), Some("y"));
        assert_eq!((t.slot_of(&c), t.slot_of(&b), t.slot_of_id(8)), (Some(1), None, Some(1)));
    }
}
