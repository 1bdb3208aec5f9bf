//! The ROS 2 side of framebus's interop tests (tests/test_ros2_interop.py): hiroz, a native Rust
//! ROS 2 that speaks rmw_zenoh's protocol, as a router, an Image subscriber, an Image publisher
//! and a graph reader. Every mode connects to (or listens on) the endpoint it is given and prints
//! JSON lines on stdout, one per event, so the tests can read them as they come.
//!
//! ros2-peer router --listen EP
//! ros2-peer sub --connect EP --topic T [--count N] [--timeout S] [--data-dir DIR] [QOS]
//!               (each image's line has recv_ns: the wall clock, Unix ns, when it arrived)
//! ros2-peer sub-video --connect EP --topic T [--count N] [--timeout S] [--data-dir DIR] [QOS]
//!               (foxglove_msgs/msg/CompressedVideo: per message its stamp, frame_id, format, length,
//!               whether it starts with an Annex B start code, its first NAL unit types and recv_ns;
//!               with --data-dir each message's data goes to DIR/N.h264)
//! ros2-peer pub --connect EP --topic T [--encoding E] [--width W] [--height H] [--count N] [--rate HZ]
//!               [--frame-id F] [--stamp-sec S] [--wait-subs N] [QOS]
//! ros2-peer graph --connect EP [--interval S] [--count N]
//! ros2-peer router-config   (hiroz's router settings, one {"key", "value"} line each)
//!
//! Every mode but router takes --mode peer|client (default peer, as ROS 2 nodes) and --domain N.
//! QOS: --reliability reliable|best_effort --durability volatile|transient_local --depth N.
//! The images the publisher sends are deterministic: byte i of image k (k from 0) is
//! (i * 7 + k * 13) % 251, the stamp is (stamp-sec + k) s and k * 1000 ns.

use std::collections::HashMap;
use std::io::Write;
use std::num::NonZeroUsize;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hiroz::config::{RouterConfigBuilder, SessionConfigBuilder};
use hiroz::context::{ZContext, ZContextBuilder};
use hiroz::qos::{QosDurability, QosHistory, QosProfile, QosReliability};
use hiroz::Builder;
use hiroz_msgs::builtin_interfaces::Time;
use hiroz_msgs::sensor_msgs::Image;
use hiroz_msgs::std_msgs::Header;
use zenoh::Wait;
use zenoh_buffers::buffer::SplitBuffer;

type Res<T> = Result<T, String>;

/// foxglove_msgs/msg/CompressedVideo, defined here as hiroz lets a program define a message
/// type of its own: its fields (serde, CDR), its DDS type name and its RIHS01 hash (the value
/// framebus puts in the topic's key, computed from the same definition).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
struct CompressedVideo {
    timestamp: Time,
    frame_id: String,
    data: Vec<u8>,
    format: String,
}

impl hiroz::msg::ZMessage for CompressedVideo {
    type Serdes = hiroz::msg::SerdeCdrSerdes<CompressedVideo>;
}

impl hiroz::MessageTypeInfo for CompressedVideo {
    fn type_name() -> &'static str {
        "foxglove_msgs::msg::dds_::CompressedVideo_"
    }

    fn type_hash() -> hiroz::TypeHash {
        hiroz::TypeHash::from_rihs_string("RIHS01_32039eafc3770e589c86c4dabff9c392ce9955ebffd43f5f60763011d43d8d1d")
            .expect("a valid RIHS01 hash")
    }
}

impl hiroz::WithTypeInfo for CompressedVideo {}

struct Args {
    mode: String,
    opts: HashMap<String, String>,
}

impl Args {
    fn parse() -> Res<Self> {
        let mut it = std::env::args().skip(1);
        let mode = it.next().ok_or("usage: ros2-peer router|sub|sub-video|pub|graph [--option value ...]")?;
        let mut opts = HashMap::new();
        while let Some(flag) = it.next() {
            let name = flag.strip_prefix("--").ok_or_else(|| format!("expected --option, got {flag:?}"))?;
            let value = it.next().ok_or_else(|| format!("--{name} needs a value"))?;
            opts.insert(name.to_string(), value);
        }
        Ok(Self { mode, opts })
    }

    fn get(&self, name: &str) -> Option<&str> {
        self.opts.get(name).map(String::as_str)
    }

    fn need(&self, name: &str) -> Res<&str> {
        self.get(name).ok_or_else(|| format!("--{name} is required in mode {}", self.mode))
    }

    fn num<T: std::str::FromStr>(&self, name: &str, default: T) -> Res<T> {
        match self.get(name) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{name}: not a number: {v:?}")),
        }
    }
}

fn emit(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

fn json_str(s: &str) -> String {
    let mut out = String::from("\"");
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn qos(args: &Args) -> Res<QosProfile> {
    let reliability = match args.get("reliability").unwrap_or("reliable") {
        "reliable" => QosReliability::Reliable,
        "best_effort" => QosReliability::BestEffort,
        other => return Err(format!("--reliability: reliable or best_effort, got {other:?}")),
    };
    let durability = match args.get("durability").unwrap_or("volatile") {
        "volatile" => QosDurability::Volatile,
        "transient_local" => QosDurability::TransientLocal,
        other => return Err(format!("--durability: volatile or transient_local, got {other:?}")),
    };
    let depth = NonZeroUsize::new(args.num("depth", 10usize)?).ok_or("--depth must be at least 1")?;
    Ok(QosProfile { reliability, durability, history: QosHistory::KeepLast(depth), ..Default::default() })
}

fn context(args: &Args) -> Res<ZContext> {
    let endpoint = args.need("connect")?;
    let mode = match args.get("mode").unwrap_or("peer") {
        "peer" => "peer",
        "client" => "client",
        other => return Err(format!("--mode: peer or client, got {other:?}")),
    };
    let config = SessionConfigBuilder::new()
        .with_router_endpoint(endpoint)
        .with_override("mode", serde_json::json!(mode), "--mode")
        .build_config()
        .map_err(|e| e.to_string())?;
    ZContextBuilder::default()
        .with_domain_id(args.num("domain", 0usize)?)
        .with_zenoh_config(config)
        .build()
        .map_err(|e| format!("cannot open the Zenoh session to {endpoint}: {e}"))
}

fn router(args: &Args) -> Res<()> {
    let endpoint = args.need("listen")?;
    let config = RouterConfigBuilder::new().with_listen_endpoint(endpoint).build().map_err(|e| e.to_string())?;
    let session = zenoh::open(config).wait().map_err(|e| format!("cannot start the router on {endpoint}: {e}"))?;
    emit(&format!("{{\"router\":{},\"zid\":\"{}\"}}", json_str(endpoint), session.zid()));
    loop {
        std::thread::sleep(Duration::from_secs(3600)); // until killed
    }
}

fn router_config() -> Res<()> {
    for o in hiroz::config::router_overrides() {
        emit(&serde_json::json!({"key": o.key, "value": o.value}).to_string());
    }
    Ok(())
}

/// Byte i of image k.
fn pattern(k: u64, n: usize) -> Vec<u8> {
    let base = (k * 13 % 251) as usize;
    (0..n).map(|i| ((i * 7 + base) % 251) as u8).collect()
}

fn bytes_per_pixel(encoding: &str) -> Res<usize> {
    Ok(match encoding {
        "mono8" | "8UC1" => 1,
        "mono16" | "16UC1" => 2,
        "rgb8" | "bgr8" => 3,
        "rgba8" | "bgra8" | "32FC1" => 4,
        "rgb16" | "bgr16" => 6,
        other => return Err(format!("--encoding: {other:?} is not one the peer publishes")),
    })
}

fn publisher(args: &Args) -> Res<()> {
    let ctx = context(args)?;
    let topic = args.need("topic")?;
    let node = ctx.create_node(args.get("node").unwrap_or("hiroz_pub")).without_parameters().build().map_err(|e| e.to_string())?;
    let publisher = node.create_pub::<Image>(topic).with_qos(qos(args)?).build().map_err(|e| e.to_string())?;
    let encoding = args.get("encoding").unwrap_or("rgb8").to_string();
    let (width, height) = (args.num("width", 320u32)?, args.num("height", 240u32)?);
    let (count, rate) = (args.num("count", 10u64)?, args.num("rate", 10.0f64)?);
    let stamp_sec = args.num("stamp-sec", 1_700_000_000i32)?;
    let frame_id = args.get("frame-id").unwrap_or("hiroz_camera").to_string();
    let step = width as usize * bytes_per_pixel(&encoding)?;
    let wait_subs = args.num("wait-subs", 0usize)?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.num("timeout", 30.0f64)?);
    let graph = ctx.graph();
    let qualified = publisher.entity.topic.clone();
    while graph.count(hiroz::entity::EndpointKind::Subscription, &qualified) < wait_subs {
        if Instant::now() > deadline {
            return Err(format!("no {wait_subs} subscription(s) on {qualified} before the timeout"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    emit(&format!("{{\"ready\":true,\"topic\":{}}}", json_str(&qualified)));
    let period = Duration::from_secs_f64(1.0 / rate);
    let mut next = Instant::now();
    for k in 0..count {
        let msg = Image {
            header: Header { stamp: Time { sec: stamp_sec + k as i32, nanosec: (k * 1000) as u32 }, frame_id: frame_id.clone() },
            height,
            width,
            encoding: encoding.clone(),
            is_bigendian: 0,
            step: step as u32,
            data: pattern(k, step * height as usize).into(),
        };
        publisher.publish(&msg).map_err(|e| e.to_string())?;
        emit(&format!("{{\"published\":{k}}}"));
        next += period;
        if let Some(wait) = next.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
    }
    emit("{\"done\":true}");
    std::thread::sleep(Duration::from_millis(args.num("linger-ms", 500u64)?));
    Ok(())
}

/// What both subscribers share: announces the subscription (`ready`), takes messages from
/// `recv` (a receive with a timeout) until --count arrived or --timeout passed, hands each to
/// `each` with its number, its receipt time (ns since the epoch) and --data-dir, and says how
/// many came (`done`). An error when fewer than an asked --count arrived.
fn take<M>(
    args: &Args,
    topic: &str,
    mut recv: impl FnMut(Duration) -> Option<M>,
    mut each: impl FnMut(&M, u64, u128, Option<&Path>) -> Res<()>,
) -> Res<()> {
    let count = args.num("count", u64::MAX)?;
    let deadline = Instant::now() + Duration::from_secs_f64(args.num("timeout", 60.0f64)?);
    let data_dir = args.get("data-dir").map(PathBuf::from);
    emit(&format!("{{\"ready\":true,\"topic\":{}}}", json_str(topic)));
    let mut received = 0u64;
    while received < count && Instant::now() < deadline {
        let Some(msg) = recv(Duration::from_millis(100)) else { continue };
        let recv_ns = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos()).unwrap_or(0);
        each(&msg, received, recv_ns, data_dir.as_deref())?;
        received += 1;
    }
    emit(&format!("{{\"done\":true,\"received\":{received}}}"));
    if received < count && count != u64::MAX {
        return Err(format!("received {received} of {count} messages before the timeout"));
    }
    Ok(())
}

/// Writes one message's data into --data-dir as `<n>.<ext>`.
fn dump(dir: &Path, n: u64, ext: &str, data: &[u8]) -> Res<()> {
    std::fs::write(dir.join(format!("{n}.{ext}")), data).map_err(|e| format!("cannot write into {}: {e}", dir.display()))
}

fn subscriber(args: &Args) -> Res<()> {
    let ctx = context(args)?;
    let node = ctx.create_node(args.get("node").unwrap_or("hiroz_sub")).without_parameters().build().map_err(|e| e.to_string())?;
    let sub = node.create_sub::<Image>(args.need("topic")?).with_qos(qos(args)?).build().map_err(|e| e.to_string())?;
    take(
        args,
        &sub.entity().topic,
        |t| sub.recv_timeout(t).ok(),
        |msg: &Image, n, recv_ns, dir| {
            let data = msg.data.contiguous();
            let (mut h, mut sum) = (0xcbf2_9ce4_8422_2325u64, 0u64); // FNV-1a 64 and the byte sum
            for &b in data.iter() {
                h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
                sum += b as u64;
            }
            if let Some(dir) = dir {
                dump(dir, n, "bin", &data)?;
            }
            emit(&format!(
            "{{\"n\":{n},\"width\":{},\"height\":{},\"encoding\":{},\"step\":{},\"is_bigendian\":{},\"stamp_sec\":{},\"stamp_nanosec\":{},\"frame_id\":{},\"len\":{},\"fnv1a64\":\"{h:016x}\",\"sum\":{sum},\"recv_ns\":{recv_ns}}}",
            msg.width,
            msg.height,
            json_str(&msg.encoding),
            msg.step,
            msg.is_bigendian,
            msg.header.stamp.sec,
            msg.header.stamp.nanosec,
            json_str(&msg.header.frame_id),
            data.len(),
        ));
            Ok(())
        },
    )
}

/// Whether `data` starts with an Annex B start code, and the types of its first `max` NAL units.
fn annex_b(data: &[u8], max: usize) -> (bool, Vec<u8>) {
    let starts = data.starts_with(&[0, 0, 1]) || data.starts_with(&[0, 0, 0, 1]);
    let mut types = Vec::new();
    let mut i = 0;
    while i + 3 < data.len() && types.len() < max {
        if data[i] == 0 && data[i + 1] == 0 && data[i + 2] == 1 {
            types.push(data[i + 3] & 0x1f);
            i += 3;
        } else {
            i += 1;
        }
    }
    (starts, types)
}

fn video_subscriber(args: &Args) -> Res<()> {
    let ctx = context(args)?;
    let node = ctx.create_node(args.get("node").unwrap_or("hiroz_video_sub")).without_parameters().build().map_err(|e| e.to_string())?;
    let sub = node.create_sub::<CompressedVideo>(args.need("topic")?).with_qos(qos(args)?).build().map_err(|e| e.to_string())?;
    take(
        args,
        &sub.entity().topic,
        |t| sub.recv_timeout(t).ok(),
        |msg: &CompressedVideo, n, recv_ns, dir| {
            if let Some(dir) = dir {
                dump(dir, n, "h264", &msg.data)?;
            }
            let (starts, types) = annex_b(&msg.data, 8);
            let types: Vec<String> = types.iter().map(|t| t.to_string()).collect();
            emit(&format!(
            "{{\"n\":{n},\"stamp_sec\":{},\"stamp_nanosec\":{},\"frame_id\":{},\"format\":{},\"len\":{},\"annex_b\":{starts},\"nal_types\":[{}],\"recv_ns\":{recv_ns}}}",
            msg.timestamp.sec,
            msg.timestamp.nanosec,
            json_str(&msg.frame_id),
            json_str(&msg.format),
            msg.data.len(),
            types.join(","),
        ));
            Ok(())
        },
    )
}

/// "pkg::msg::dds_::Name_" -> "pkg/msg/Name" (the form `ros2 topic list -t` prints).
fn ros_type(name: &str) -> String {
    match name.split_once("::dds_::") {
        Some((head, tail)) => format!("{}/{}", head.replace("::", "/"), tail.trim_end_matches('_')),
        None => name.to_string(),
    }
}

fn graph(args: &Args) -> Res<()> {
    let ctx = context(args)?;
    let interval = Duration::from_secs_f64(args.num("interval", 0.2f64)?);
    let count = args.num("count", u64::MAX)?;
    for _ in 0..count {
        std::thread::sleep(interval);
        let mut nodes: Vec<String> = ctx
            .graph()
            .get_node_names()
            .into_iter()
            .map(|(name, ns)| if ns == "/" { format!("/{name}") } else { format!("{ns}/{name}") })
            .collect();
        nodes.sort();
        let mut topics: Vec<(String, String)> =
            ctx.graph().get_topic_names_and_types().into_iter().map(|(t, ty)| (t, ros_type(&ty))).collect();
        topics.sort();
        let nodes: Vec<String> = nodes.iter().map(|n| json_str(n)).collect();
        let topics: Vec<String> = topics.iter().map(|(t, ty)| format!("[{},{}]", json_str(t), json_str(ty))).collect();
        emit(&format!("{{\"nodes\":[{}],\"topics\":[{}]}}", nodes.join(","), topics.join(",")));
    }
    Ok(())
}

fn main() {
    let result = Args::parse().and_then(|args| match args.mode.as_str() {
        "router" => router(&args),
        "sub" => subscriber(&args),
        "sub-video" => video_subscriber(&args),
        "pub" => publisher(&args),
        "graph" => graph(&args),
        "router-config" => router_config(),
        other => Err(format!("unknown mode {other:?}: router, sub, sub-video, pub or graph")),
    });
    if let Err(e) = result {
        eprintln!("ros2-peer: {e}");
        std::process::exit(2);
    }
}
