//! The whole game in the deterministic stepper: four named players on a lossy link chase
//! each other; tags, chat and the scoreboard reach everyone in the same order; a player who
//! swears and one who idles are kicked and read why; the final scoreboard keeps everyone.
#![allow(clippy::unwrap_used, missing_docs)]

use volley::client::predict::Prediction;
use volley::prelude::*;
use volley_tag::{BANNED_WORD, COLUMNS, RunnerModel, TagInput, TagWorld, ToClient, ToServer, steer, user_data_for};

const NAMES: [&str; 4] = ["ada", "bo", "cy", "dee"];

fn s_schema() -> &'static Schema {
    static SCHEMA: std::sync::OnceLock<Schema> = std::sync::OnceLock::new();
    SCHEMA.get_or_init(volley_tag::schema)
}

#[test]
fn a_match_of_tag_in_the_stepper() {
    let mut s = Stepper::new(TagWorld::default(), 60, 8);
    let ms = std::time::Duration::from_millis;
    let link = LinkProfile { latency: ms(30), jitter: ms(5), loss: 0.02, burst: None };
    for (i, name) in NAMES.iter().enumerate() {
        s.add_client_with(link, i as u64 + 1, user_data_for(name));
    }
    let mut heard: Vec<Vec<ToClient>> = vec![Vec::new(); NAMES.len()];
    // Every player predicts its own runner (one call a frame), and counts what reconciling
    // corrected beyond the snapshot's rounding (positions go to the centimetre).
    let mut me: Vec<(Prediction<glam::Vec2, TagInput>, RunnerModel)> =
        (0..NAMES.len()).map(|_| (Prediction::new(120, ms(100)).tolerance(0.01), RunnerModel::default())).collect();
    let mut predicted = [0u32; NAMES.len()];
    let mut its = 0u32;
    let mut was_it = [false; NAMES.len()];
    for tick in 0..60 * 40 {
        if tick == 120 {
            s.clients[0].client.channel().send_message(&ToServer::Chat("hello, all".into())).unwrap();
        }
        if tick == 600 {
            s.clients[3].client.channel().send_message(&ToServer::Chat(format!("well {BANNED_WORD}"))).unwrap();
        }
        // Client 2 stops steering after five seconds: an idle player.
        s.step_with(|i, c, now| {
            if i == 2 && tick > 300 { TagInput::default() } else { steer(&c.client, now) }.to_bytes().to_vec()
        });
        let now = s.now;
        for (i, c) in s.clients.iter_mut().enumerate() {
            while let Some(m) = c.client.channel().recv_message::<ToClient>() {
                heard[i].push(m.unwrap());
            }
            let (p, model) = &mut me[i];
            if p.frame(&c.client, now, model).is_some() {
                predicted[i] += 1;
            }
            // How often this runner became or stopped being "it" (its speed changed under
            // inputs in flight: a correction the client could not foresee).
            let it = c.client.own_entity().and_then(|id| c.client.latest()?.read::<volley_tag::Runner>(s_schema(), id));
            if let Some(r) = it {
                its += u32::from(r.it != was_it[i]);
                was_it[i] = r.it;
            }
        }
    }
    // The prediction ran for every player the whole time it played, and was exact but for
    // the moments its runner's speed changed ("it" passed on): on a 2 % lossy link each
    // input still arrives (it travels in four packets), so the server applies what the
    // client replayed.
    for (i, (p, _)) in me.iter().enumerate() {
        assert!(predicted[i] > 300, "player {i} predicted {} frames", predicted[i]);
        println!("player {i}: {} corrections, last {:?}", p.corrections(), p.last_correction());
    }
    let corrections: u64 = me.iter().map(|(p, _)| p.corrections()).sum();
    assert!(corrections <= u64::from(its) * 2 + 4, "{corrections} corrections for {its} changes of who is it");
    // The kicks, with their reasons.
    assert_eq!(s.clients[3].client.ended(), Some(SessionEnd::Kicked("language".into())));
    assert_eq!(s.clients[2].client.ended(), Some(SessionEnd::Kicked("idle for 10 s".into())));
    assert!(s.clients[0].client.ended().is_none() && s.clients[1].client.ended().is_none());
    assert_eq!(s.players(), 2);

    // Everyone who stayed heard the chat, under the sender's name, and the same tags in the
    // same order; the tags happened.
    let chat = ToClient::Chat { from: "ada".into(), text: "hello, all".into() };
    let tags = |h: &[ToClient]| h.iter().filter(|m| matches!(m, ToClient::Tagged { .. })).cloned().collect::<Vec<_>>();
    for h in &heard[..2] {
        assert!(h.contains(&chat), "the chat line");
    }
    assert!(!heard[3].iter().any(|m| matches!(m, ToClient::Chat { text, .. } if text.contains(BANNED_WORD))));
    assert_eq!(tags(&heard[0]), tags(&heard[1]));
    assert!(!tags(&heard[0]).is_empty(), "somebody was tagged in 40 s");
    // The built-in scoreboard: names from the tokens, the world's fields, pings near the
    // link's 60 ms round trip; both players who stayed see the same board.
    let board = s.clients[0].client.scoreboard();
    assert_eq!(board.columns(), COLUMNS);
    let mut names: Vec<&str> = board.rows().map(|r| r.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, ["ada", "bo"]);
    let tags_on_board: i32 = board.rows().map(|r| r.fields[0]).sum();
    assert!(tags_on_board > 0);
    assert!(board.rows().all(|r| (50..=90).contains(&r.ping_ms)), "{:?}", board.rows().collect::<Vec<_>>());
    assert_eq!(board, s.clients[1].client.scoreboard());

    // Shutting down: the last two are told, and the final scoreboard keeps all four.
    s.shutdown();
    assert_eq!(s.clients[0].client.ended(), Some(SessionEnd::ShuttingDown));
    let last = s.world.final_scores.as_ref().unwrap();
    let mut names: Vec<&str> = last.iter().map(|s| s.name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(names, NAMES);
    assert_eq!(last.iter().map(|s| s.tags).sum::<u32>() as usize, tags(&heard[0]).len());
}
