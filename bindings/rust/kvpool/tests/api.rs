// SPDX-License-Identifier: MIT
//! The crate as a newcomer meets it (issue 41): invalid arguments name
//! themselves, the C API an engine needs is reachable (event fields, a
//! commit with token ids, the sha256_cbor seed, the event medium), and
//! every public kvp_ function of kvpool.h has a Rust counterpart or is
//! listed here as C-only with a reason.
use std::sync::{Arc, Mutex};

use kvpool::{
    cbor_seed_root, hash_blocks, hash_cbor_block, set_cbor_seed, CommitInfo, ErrorKind, EventKind,
    HashAlgo, HashKeys, Layout, Manager, ManagerConfig, Pool, PoolConfig,
};

fn invalid_detail(e: kvpool::Error) -> &'static str {
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let d = e.detail().expect("the error names the argument");
    assert!(e.to_string().contains(d), "{}", e);
    assert!(format!("{:?}", e).contains(d));
    d
}

#[test]
fn invalid_arguments_name_themselves() {
    let pool = Pool::new(&PoolConfig::new(64, 16)).unwrap();
    let d = invalid_detail(
        Manager::new(&pool, &ManagerConfig::new().eviction_threshold(2.0)).unwrap_err(),
    );
    assert!(d.contains("eviction_threshold") && d.contains("[0, 1]"), "{}", d);
    let e = Manager::new(&pool, &ManagerConfig::new().watermark(-1.0)).unwrap_err();
    assert_eq!(
        e.to_string(),
        "kvpool: invalid argument: Manager: watermark must be in [0, 1) (errno 22)"
    );
    let d = invalid_detail(
        Manager::new(&pool, &ManagerConfig::new().eviction_threshold(f32::NAN)).unwrap_err(),
    );
    assert!(d.contains("eviction_threshold"));
    for bad in ["a\nb", "", "a\0b"] {
        let d = invalid_detail(Manager::new(&pool, &ManagerConfig::new().name(bad)).unwrap_err());
        assert!(d.contains("name") && d.contains("63 bytes"), "{}", d);
    }
    let long = "x".repeat(64);
    invalid_detail(Manager::new(&pool, &ManagerConfig::new().name(&long)).unwrap_err());
    let d = invalid_detail(
        Manager::new(&pool, &ManagerConfig::new().max_pinned(65)).unwrap_err(),
    );
    assert!(d.contains("max_pinned"));
    let d = invalid_detail(Pool::new(&PoolConfig::new(8, 0)).unwrap_err());
    assert!(d.contains("block_tokens") && d.contains("at least 1"));
    let d = invalid_detail(Pool::new(&PoolConfig::new(8, 16).cache_blocks(9)).unwrap_err());
    assert!(d.contains("cache_blocks"));
    let d = invalid_detail(Pool::new(&PoolConfig::new(8, 16).k_only(true)).unwrap_err());
    assert!(d.contains("k_only"));
    let d = invalid_detail(hash_blocks(HashAlgo::Sha256, None, &HashKeys::default(), &[1], 0).unwrap_err());
    assert!(d.contains("block_tokens"));
    // The C library's refusals carry no detail.
    let m = Manager::new(&pool, &ManagerConfig::default()).unwrap();
    assert_eq!(m.fork(1, 2).unwrap_err().detail(), None);
    // Data calls say what is wrong with the rows.
    let lay = Layout {
        num_layers: 1,
        num_kv_heads: 1,
        head_dim: 4,
        dtype: kvpool::DType::F32,
    };
    let dp = Pool::new(&PoolConfig::new(8, 4).layout(lay)).unwrap();
    let dm = Manager::new(&dp, &ManagerConfig::default()).unwrap();
    dm.create(1, 4).unwrap();
    let d = invalid_detail(dm.write::<f32>(1, 0, 0, &[0.0; 3], &[0.0; 4]).unwrap_err());
    assert!(d.contains("k must hold one row"), "{}", d);
}

#[test]
fn events_carry_what_the_commit_gave() {
    let pool = Pool::new(&PoolConfig::new(64, 16)).unwrap();
    let mut m = Manager::new(&pool, &ManagerConfig::new().prefix_cache(true)).unwrap();
    type Seen = (u64, Option<Vec<u32>>, Option<String>, Option<i64>, Vec<String>, Option<String>);
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    m.set_event_medium(Some("GPU")).unwrap();
    m.set_event_callback(Some(Box::new(move |e: &kvpool::Event<'_>| {
        if e.kind == EventKind::Stored {
            s2.lock().unwrap().push((
                e.seq,
                e.token_ids.map(|t| t.to_vec()),
                e.lora_name.map(String::from),
                e.lora_id,
                e.extra_keys().map(String::from).collect(),
                e.medium.map(String::from),
            ));
        }
    })))
    .unwrap();
    let prompt: Vec<u32> = (100..148).collect();
    let keys = HashKeys {
        lora: Some("ada"),
        ..Default::default()
    };
    let h = hash_blocks(HashAlgo::Sha256, None, &keys, &prompt, 16).unwrap();
    m.create(1, 48).unwrap();
    let info = CommitInfo {
        tokens: Some(&prompt),
        lora_name: Some("ada"),
        lora_id: Some(7),
        extra_keys: &["mm:1"],
        ..Default::default()
    };
    assert_eq!(m.commit_ex(1, &h, &info).unwrap(), 3);
    let short = CommitInfo {
        tokens: Some(&prompt[..20]),
        ..Default::default()
    };
    m.create(2, 48).unwrap();
    let h2 = hash_blocks(HashAlgo::Sha256, None, &HashKeys::default(), &prompt, 16).unwrap();
    assert_eq!(m.commit_ex(2, &h2, &short).unwrap_err().kind(), ErrorKind::InvalidArgument);
    assert_eq!(m.commit_ex(2, &h2, &CommitInfo::default()).unwrap(), 3);
    m.set_event_medium(None).unwrap();
    assert_eq!(
        m.set_event_medium(Some("x".repeat(16).as_str())).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let seen = seen.lock().unwrap();
    assert_eq!(seen.len(), 2);
    assert_eq!(
        seen[0],
        (
            0,
            Some(prompt.clone()),
            Some("ada".into()),
            Some(7),
            vec!["mm:1".to_string()],
            Some("GPU".into())
        )
    );
    assert_eq!(seen[1], (1, None, None, None, vec![], Some("GPU".into())));
    let mut total = m.stats();
    total.add(&m.stats());
    assert_eq!(total.prefix_commits, 2 * m.stats().prefix_commits);
    assert_eq!(total.blocks_total, 64);
}

#[test]
fn emit_cached_events_reports_reused_blocks() {
    let pool = Pool::new(&PoolConfig::new(16, 16)).unwrap();
    let cfg = ManagerConfig::new().emit_cached_events(true);
    let d = invalid_detail(Manager::new(&pool, &cfg).unwrap_err());
    assert!(d.contains("emit_cached_events needs prefix_cache"), "{}", d);
    let mut m = Manager::new(&pool, &cfg.prefix_cache(true)).unwrap();
    assert!(m.config().emit_cached_events);
    let seen: Arc<Mutex<Vec<(usize, bool, bool)>>> = Arc::new(Mutex::new(Vec::new()));
    let s2 = Arc::clone(&seen);
    m.set_event_callback(Some(Box::new(move |e: &kvpool::Event<'_>| {
        if e.kind == EventKind::Stored {
            s2.lock().unwrap().push((e.hashes.len(), e.parent.is_none(), e.reused));
        }
    })))
    .unwrap();
    let prompt: Vec<u32> = (0..49).collect();
    let h = hash_blocks(HashAlgo::Sha256, None, &HashKeys::default(), &prompt, 16).unwrap();
    assert_eq!(m.create_cached(1, &h, 49).unwrap(), 0);
    assert_eq!(m.commit(1, &h).unwrap(), 3);
    assert_eq!(m.create_cached(2, &h, 49).unwrap(), 48);
    assert_eq!(*seen.lock().unwrap(), vec![(3, true, false), (3, true, true)]);
}

#[test]
fn sha256_cbor_seed() {
    let tokens: Vec<u32> = (0..32).collect();
    let root = cbor_seed_root("0").unwrap();
    set_cbor_seed("0").unwrap();
    let h = hash_blocks(HashAlgo::Sha256Cbor, None, &HashKeys::default(), &tokens, 16).unwrap();
    assert_eq!(h[0], hash_cbor_block(&root, &tokens[..16], &[]).unwrap());
    assert_eq!(h[1], hash_cbor_block(&h[0], &tokens[16..], &[]).unwrap());
    let tail = u64::from_be_bytes(h[0].0[24..].try_into().unwrap());
    assert_eq!(h[0].to_u64(), tail);
    assert!(set_cbor_seed("a\0b").is_err());
}

/// kvpool.h's functions and the Rust that reaches them ("Type::method",
/// or a free function), or "C-only: " and why not.
const COVERAGE: &[(&str, &str)] = &[
    ("kvp_strerror", "Error::message"),
    ("kvp_last_error", "Error::requested"),
    ("kvp_conf_write", "C-only: it writes to a C FILE *; `kvpool conf` prints the same"),
    ("kvp_pool_create", "Pool::new"),
    ("kvp_pool_ref", "Pool::clone"),
    ("kvp_pool_unref", "Pool::drop"),
    ("kvp_pool_alloc", "Pool::alloc"),
    ("kvp_pool_free", "Pool::free"),
    ("kvp_block_ref", "Pool::block_ref"),
    ("kvp_block_refcount", "Pool::refcount"),
    ("kvp_block_data", "Block::data"),
    ("kvp_block_bytes", "Pool::block_bytes"),
    ("kvp_pool_block_tokens", "Pool::block_tokens"),
    ("kvp_pool_get_config", "Pool::config"),
    ("kvp_pool_stats", "Pool::stats"),
    ("kvp_pool_check", "Pool::check"),
    ("kvp_pool_row_bytes", "Pool::row_bytes"),
    ("kvp_thread_flush", "thread_flush"),
    ("kvp_manager_create", "Manager::new"),
    ("kvp_manager_destroy", "Manager::drop"),
    ("kvp_manager_get_config", "Manager::config"),
    ("kvp_manager_set_policy", "Manager::set_policy"),
    ("kvp_manager_seqs", "Manager::sequences_into"),
    ("kvp_seq_create", "Manager::create"),
    (
        "kvp_seq_append",
        "C-only: Manager::append calls kvp_seq_append_ex, which also says which block took the token",
    ),
    ("kvp_seq_append_ex", "Manager::append"),
    ("kvp_seq_reserve", "Manager::reserve"),
    (
        "kvp_seq_append_batch",
        "C-only: a Rust call costs what the C call does, so a loop of Manager::append is the batch (it exists for Python's per-call cost)",
    ),
    ("kvp_seq_fork", "Manager::fork"),
    ("kvp_seq_fork_n", "Manager::fork_n"),
    ("kvp_seq_free", "Manager::free"),
    ("kvp_seq_truncate", "Manager::truncate"),
    ("kvp_seq_stream_trim", "Manager::stream_trim"),
    ("kvp_seq_set_priority", "Manager::set_priority"),
    ("kvp_seq_info", "Manager::info"),
    ("kvp_seq_blocks", "Manager::blocks_into"),
    ("kvp_admit", "Manager::admit"),
    ("kvp_evict", "Manager::evict"),
    ("kvp_evict_peek", "Manager::peek_victim"),
    ("kvp_evict_until", "Manager::evict_until_into"),
    ("kvp_manager_stats", "Manager::stats"),
    ("kvp_stats_add", "Stats::add"),
    (
        "kvp_manager_dump",
        "C-only: it writes to a C FILE *; Manager::stats and Pool::metrics give the same numbers",
    ),
    ("kvp_manager_id", "Manager::id"),
    ("kvp_manager_name", "Manager::name"),
    ("kvp_manager_check", "Manager::check"),
    ("kvp_export_block_table", "Manager::block_table"),
    ("kvp_export_csr", "Manager::csr"),
    ("kvp_export_slot_mapping", "Manager::slot_mapping"),
    (
        "kvp_hash_blocks",
        "C-only: the form without a capacity; hash_blocks calls kvp_hash_blocks_cap",
    ),
    ("kvp_hash_blocks_cap", "hash_blocks"),
    ("kvp_hash_set_xxh3_seed", "set_xxh3_seed"),
    ("kvp_hash_set_cbor_seed", "set_cbor_seed"),
    ("kvp_hash_cbor_seed_root", "cbor_seed_root"),
    ("kvp_hash_cbor_block", "hash_cbor_block"),
    ("kvp_hash_to_u64", "BlockHash::to_u64"),
    ("kvp_seq_create_cached", "Manager::create_cached"),
    ("kvp_prefix_match", "Manager::prefix_match"),
    ("kvp_seq_commit", "Manager::commit"),
    ("kvp_seq_commit_ex", "Manager::commit_ex"),
    ("kvp_seq_commit_retained", "Manager::commit_retained"),
    ("kvp_manager_tick", "Manager::tick"),
    ("kvp_prefix_retention", "Manager::retention"),
    ("kvp_prefix_reset", "Manager::prefix_reset"),
    ("kvp_manager_set_event_medium", "Manager::set_event_medium"),
    ("kvp_manager_set_event_cb", "Manager::set_event_callback"),
    ("kvp_seq_write", "Manager::write"),
    ("kvp_seq_read", "Manager::read"),
    ("kvp_seq_gather", "Manager::gather"),
    (
        "kvp_seq_gather_cap",
        "C-only: Manager::gather reads token by token under the lock (kvp_seq_read), so a sequence that grows meanwhile cannot overflow it",
    ),
    (
        "kvp_metrics_write",
        "C-only: it writes to a C FILE *; Pool::metrics returns the same text (kvp_metrics_format)",
    ),
    ("kvp_metrics_format", "Pool::metrics"),
];

/// The kvp_ function names declared KVP_API in kvpool.h.
fn header_functions(header: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = header;
    while let Some(i) = rest.find("KVP_API ") {
        rest = &rest[i + 8..];
        let decl = &rest[..rest.find(&['(', ';'][..]).unwrap_or(0)];
        if rest[decl.len()..].starts_with('(') {
            if let Some(j) = decl.rfind("kvp_") {
                out.push(decl[j..].trim().to_string());
            }
        }
    }
    out
}

#[test]
fn every_c_function_is_reached() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let header = std::fs::read_to_string(format!("{}/../../../include/kvpool.h", dir)).unwrap();
    let api = header_functions(&header);
    assert!(api.len() > 60, "{:?}", api);
    let mut src = String::new();
    for e in std::fs::read_dir(format!("{}/src", dir)).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "sys.rs" {
            src += &std::fs::read_to_string(&p).unwrap();
        }
    }
    let missing: Vec<&String> = api
        .iter()
        .filter(|f| !COVERAGE.iter().any(|(c, _)| c == f))
        .collect();
    assert!(missing.is_empty(), "no Rust counterpart or C-only reason: {:?}", missing);
    for (c, rust) in COVERAGE {
        assert!(api.iter().any(|f| f == c), "{} is not in kvpool.h any more", c);
        if let Some(why) = rust.strip_prefix("C-only: ") {
            assert!(why.len() > 20, "{}: say why", c);
            continue;
        }
        let name = rust.rsplit("::").next().unwrap();
        assert!(
            src.contains(&format!("fn {}(", name)) || src.contains(&format!("fn {}<", name)),
            "{}: no fn {} in src/",
            c,
            name
        );
        assert!(
            src.contains(&format!("sys::{}(", c)),
            "{}: no wrapper in src/ calls it",
            c
        );
    }
}
