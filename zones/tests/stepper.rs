//! Zones in the stepper (the server's world, directory, tap and border-world code with only
//! the IO swapped; the two zones' links are joined by a bus in memory): a player near a
//! border sees exactly the entities within its view radius on both sides, each once, with
//! the owning zone's quantized state; a neighbour gone quiet fades, and comes back.
#![allow(clippy::unwrap_used, missing_docs)]

use std::sync::{Arc, Mutex};

use volley::prelude::*;
use volley::protocol::snapshot::world::split_id;
use volley::server::zone::ZoneLink;

use crate::dots;
use dots::{RADIUS, Zone, read_view, within};

fn zone(me: u16) -> (Stepper<Zone>, Arc<Mutex<Option<ZoneLink>>>) {
    let (world, link) = Zone::new(me);
    (Stepper::new(world, 60, 8).with_world_kinds(&["zone", "border"]), link)
}

/// Moves every frame one zone published to the other; `deliver` false drops them (the bus is
/// down).
fn pump(from: &Arc<Mutex<Option<ZoneLink>>>, to: &Arc<Mutex<Option<ZoneLink>>>, deliver: bool) -> usize {
    let mut from = from.lock().unwrap();
    let to = to.lock().unwrap();
    let (Some(from), Some(to)) = (from.as_mut(), to.as_ref()) else { return 0 };
    let mut n = 0;
    while let Some(frames) = from.try_next_frames() {
        for f in frames {
            assert_eq!(f.to, to.me());
            if deliver {
                to.handle_frame(&f.bytes).unwrap();
                n += 1;
            }
        }
    }
    n
}

#[test]
fn a_player_near_the_border_sees_both_sides_exactly_and_a_quiet_neighbour_fades() {
    let (mut a, link_a) = zone(0);
    let (mut b, link_b) = zone(1);
    for _ in 0..3 {
        a.add_client(LinkProfile::PERFECT);
    }
    let mut checked = 0;
    let mut saw_across = 0;
    let mut faded_at = None;
    let mut returned_at = None;
    for step in 0..600u32 {
        // The bus goes down for a second in the middle.
        let bus_up = !(300..360).contains(&step);
        a.step();
        b.step();
        pump(&link_a, &link_b, bus_up);
        pump(&link_b, &link_a, bus_up);
        if step < 30 {
            continue;
        }
        for c in &a.clients {
            let Some(got) = c.client.latest() else { continue };
            let me = c.client.client_index().unwrap();
            let (mine, across) = read_view(got, me);
            let want = within(mine, RADIUS);
            if (41..300).contains(&step) || step > 400 {
                assert_eq!(across, want, "step {step}: zone 1's dots within {RADIUS} of {mine}");
                saw_across += usize::from(!want.is_empty());
                checked += 1;
            } else if !bus_up && faded_at.is_some() {
                assert!(across.is_empty(), "a faded neighbour shows nothing (step {step})");
            }
            // Before relevancy: every border entity the zone shows.
            let shown = a.view_of(me).unwrap().iter().filter(|e| split_id(e.id).0 != 0).count();
            if !bus_up && shown == 0 && faded_at.is_none() {
                faded_at = Some(step);
            }
            if bus_up && faded_at.is_some() && shown > 0 && returned_at.is_none() {
                returned_at = Some(step);
            }
        }
    }
    let faded_at = faded_at.expect("zone 1's dots faded while the bus was down");
    let returned_at = returned_at.expect("and came back");
    // Half a second of silence (30 ticks) and a tick or two of delivery.
    assert!((328..=334).contains(&faded_at), "faded at step {faded_at}");
    assert!((360..=364).contains(&returned_at), "returned at step {returned_at}");
    assert!(checked >= 3 * 450, "{checked} snapshots checked");
    assert!(saw_across > 3 * 200, "{saw_across} snapshots showed dots across the border");
    let counters = link_a.lock().unwrap().as_ref().unwrap().counters().clone();
    let n = |c: &std::sync::atomic::AtomicU64| c.load(std::sync::atomic::Ordering::Relaxed);
    assert_eq!(n(&counters.fades), 1);
    assert_eq!(n(&counters.frames_refused), 0);
    assert!(n(&counters.frames_in) > 500, "{}", n(&counters.frames_in));
    assert!(n(&counters.entities_out) > 0, "zone 0 shares its dots at x = 95");
}
