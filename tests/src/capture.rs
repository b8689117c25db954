//! What crossed the wire: a tcpdump capture of the upstream-side veth, parsed.
//!
//! Every frame on that veth was sent either by the sandbox (source MAC [`SANDBOX_MAC`]) or
//! by the upstream namespace. The kernel's own chatter (ARP, IPv6 neighbour discovery 133–136, MLD 130–132 and 143) is kept, marked by
//! [`Packet::is_housekeeping`], so a test can exclude it explicitly.

use std::collections::BTreeMap;
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr};
use std::time::Duration;

use anyhow::{Context as _, bail};
use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use hickory_proto::op::{Message, MessageType};
use pcap_file::DataLink;
use pcap_file::pcap::PcapReader;

use crate::topology::SANDBOX_MAC;

/// A parsed capture.
#[derive(Debug, Clone, Default)]
pub struct Capture {
    /// IP (and ARP) packets, in capture order.
    pub packets: Vec<Packet>,
    /// Frames that are neither IP nor ARP, or that did not parse (kept: an odd frame from the
    /// sandbox is still egress).
    pub other_frames: Vec<Frame>,
}

/// Transport protocol of a [`Packet`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// ICMP (v4).
    Icmp,
    /// ICMPv6.
    Icmpv6,
    /// ARP (`src`/`dst` are the sender/target protocol addresses).
    Arp,
    /// Any other IP protocol number (or a fragment whose transport header is not in it).
    Other(u8),
}

/// TCP header flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[allow(clippy::struct_excessive_bools)] // mirrors the header's flag bits
pub struct TcpFlags {
    /// SYN.
    pub syn: bool,
    /// ACK.
    pub ack: bool,
    /// FIN.
    pub fin: bool,
    /// RST.
    pub rst: bool,
    /// PSH.
    pub psh: bool,
}

impl TcpFlags {
    /// A connection attempt: SYN without ACK.
    #[must_use]
    pub fn is_syn_only(self) -> bool {
        self.syn && !self.ack
    }
}

/// One captured IP or ARP packet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Capture timestamp (since the epoch).
    pub time: Duration,
    /// Ethernet source.
    pub src_mac: [u8; 6],
    /// Ethernet destination.
    pub dst_mac: [u8; 6],
    /// IP source (ARP: sender protocol address).
    pub src: IpAddr,
    /// IP destination (ARP: target protocol address).
    pub dst: IpAddr,
    /// Transport protocol.
    pub proto: Proto,
    /// TCP/UDP source port.
    pub src_port: Option<u16>,
    /// TCP/UDP destination port.
    pub dst_port: Option<u16>,
    /// TCP flags.
    pub tcp_flags: Option<TcpFlags>,
    /// TCP sequence number.
    pub tcp_seq: Option<u32>,
    /// ICMPv6 type.
    pub icmpv6_type: Option<u8>,
    /// ICMP (v4) type.
    pub icmp_type: Option<u8>,
    /// Transport payload (after the TCP/UDP/ICMP header; the IP payload for other protocols).
    pub payload: Vec<u8>,
}

impl Packet {
    /// Traffic the kernel sends on its own: ARP, ICMPv6 MLD (130–132, 143) and neighbour
    /// discovery (133–136).
    #[must_use]
    pub fn is_housekeeping(&self) -> bool {
        match self.proto {
            Proto::Arp => true,
            Proto::Icmpv6 => {
                matches!(self.icmpv6_type, Some(130..=136 | 143))
            }
            _ => false,
        }
    }

    /// Whether the sandbox sent this frame (by MAC, so a spoofed source address still counts).
    #[must_use]
    pub fn sent_by_sandbox(&self) -> bool {
        self.src_mac == SANDBOX_MAC
    }
}

/// A frame that is neither IP nor ARP, or that did not parse.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Frame {
    /// Capture timestamp (since the epoch).
    pub time: Duration,
    /// The whole frame.
    pub data: Vec<u8>,
    /// Why it is not a [`Packet`].
    pub note: String,
}

impl Frame {
    /// Ethernet source, if the frame is long enough.
    #[must_use]
    pub fn src_mac(&self) -> Option<[u8; 6]> {
        self.data.get(6..12).and_then(|s| s.try_into().ok())
    }
}

impl Capture {
    /// Parses a pcap file (Ethernet link type) as written by `tcpdump -w`.
    pub fn from_pcap(reader: impl Read) -> anyhow::Result<Capture> {
        let mut reader = PcapReader::new(reader).context("reading the pcap header")?;
        let link = reader.header().datalink;
        if link != DataLink::ETHERNET {
            bail!("capture link type is {link:?}, expected Ethernet");
        }
        let mut capture = Capture::default();
        while let Some(pkt) = reader.next_packet() {
            let pkt = pkt.context("reading a pcap record")?;
            capture.push(pkt.timestamp, &pkt.data);
        }
        Ok(capture)
    }

    fn push(&mut self, time: Duration, data: &[u8]) {
        match parse_frame(time, data) {
            Ok(p) => self.packets.push(p),
            Err(note) => self.other_frames.push(Frame {
                time,
                data: data.to_vec(),
                note,
            }),
        }
    }

    /// IP packets sent by the sandbox: source MAC is the sandbox's veth, or source address is
    /// the sandbox's v4/v6 address. Includes the kernel's neighbour discovery and MLD (filter
    /// with [`Packet::is_housekeeping`]); excludes ARP.
    #[must_use]
    pub fn from_sandbox(&self, world: &crate::World) -> Vec<&Packet> {
        let (v4, v6) = (
            IpAddr::from(world.sandbox_ip_v4()),
            IpAddr::from(world.sandbox_ip_v6()),
        );
        self.packets
            .iter()
            .filter(|p| {
                p.proto != Proto::Arp && (p.sent_by_sandbox() || p.src == v4 || p.src == v6)
            })
            .collect()
    }

    /// [`Capture::from_sandbox`] without the kernel's housekeeping: what the sandbox's
    /// processes sent.
    #[must_use]
    pub fn egress(&self, world: &crate::World) -> Vec<&Packet> {
        self.from_sandbox(world)
            .into_iter()
            .filter(|p| !p.is_housekeeping())
            .collect()
    }

    /// `(source, qname, qtype)` of every DNS query seen going to port 53, UDP or TCP (TCP
    /// streams reassembled per flow). qname is as sent, without the trailing dot; qtype is the
    /// record type's mnemonic (`A`, `AAAA`, `TXT`, ...). A message to port 53 that does not
    /// parse is listed with qname `""` and qtype `"INVALID"` (it still left).
    #[must_use]
    pub fn dns_queries(&self) -> Vec<(IpAddr, String, String)> {
        let mut out = Vec::new();
        let mut tcp_flows: BTreeMap<Flow, Vec<Segment<'_>>> = BTreeMap::new();
        for p in &self.packets {
            if p.dst_port != Some(53) {
                continue;
            }
            match p.proto {
                Proto::Udp => push_queries(&mut out, p.src, &p.payload),
                Proto::Tcp if !p.payload.is_empty() => {
                    let key = (p.src, p.src_port.unwrap_or(0), p.dst);
                    tcp_flows
                        .entry(key)
                        .or_default()
                        .push((p.tcp_seq.unwrap_or(0), &p.payload));
                }
                _ => {}
            }
        }
        for ((src, _, _), mut segments) in tcp_flows {
            let base = segments.first().map_or(0, |s| s.0);
            segments.sort_by_key(|(seq, _)| seq.wrapping_sub(base));
            segments.dedup_by_key(|(seq, _)| *seq);
            let stream: Vec<u8> = segments
                .iter()
                .flat_map(|(_, d)| d.iter().copied())
                .collect();
            let mut rest = stream.as_slice();
            while rest.len() >= 2 {
                let len = usize::from(u16::from_be_bytes([rest[0], rest[1]]));
                let Some(msg) = rest.get(2..2 + len) else {
                    push_queries(&mut out, src, &rest[2..]);
                    break;
                };
                push_queries(&mut out, src, msg);
                rest = &rest[2 + len..];
            }
        }
        out
    }
}

/// A TCP flow towards port 53: (source, source port, destination).
type Flow = (IpAddr, u16, IpAddr);
/// A TCP segment: (sequence number, payload).
type Segment<'a> = (u32, &'a [u8]);

fn push_queries(out: &mut Vec<(IpAddr, String, String)>, src: IpAddr, msg: &[u8]) {
    match Message::from_vec(msg) {
        Ok(m) if m.message_type == MessageType::Query => {
            for q in &m.queries {
                let name = q.name().to_ascii();
                let name = name.strip_suffix('.').unwrap_or(&name).to_owned();
                out.push((src, name, q.query_type().to_string()));
            }
        }
        Ok(_) => {}
        Err(_) => out.push((src, String::new(), "INVALID".to_owned())),
    }
}

fn parse_frame(time: Duration, data: &[u8]) -> Result<Packet, String> {
    let sliced = SlicedPacket::from_ethernet(data).map_err(|e| format!("unparsable: {e}"))?;
    let (src_mac, dst_mac) = match &sliced.link {
        Some(etherparse::LinkSlice::Ethernet2(eth)) => (eth.source(), eth.destination()),
        _ => return Err("no Ethernet II header".to_owned()),
    };
    let mut p = Packet {
        time,
        src_mac,
        dst_mac,
        src: Ipv4Addr::UNSPECIFIED.into(),
        dst: Ipv4Addr::UNSPECIFIED.into(),
        proto: Proto::Other(0),
        src_port: None,
        dst_port: None,
        tcp_flags: None,
        tcp_seq: None,
        icmpv6_type: None,
        icmp_type: None,
        payload: Vec::new(),
    };
    match &sliced.net {
        Some(NetSlice::Ipv4(ip)) => {
            p.src = ip.header().source_addr().into();
            p.dst = ip.header().destination_addr().into();
            p.proto = Proto::Other(ip.payload().ip_number.0);
            p.payload = ip.payload().payload.to_vec();
        }
        Some(NetSlice::Ipv6(ip)) => {
            p.src = ip.header().source_addr().into();
            p.dst = ip.header().destination_addr().into();
            p.proto = Proto::Other(ip.payload().ip_number.0);
            p.payload = ip.payload().payload.to_vec();
        }
        Some(NetSlice::Arp(arp)) => {
            p.proto = Proto::Arp;
            if let (Ok(s), Ok(d)) = (
                <[u8; 4]>::try_from(arp.sender_protocol_addr()),
                <[u8; 4]>::try_from(arp.target_protocol_addr()),
            ) {
                p.src = s.into();
                p.dst = d.into();
            }
            return Ok(p);
        }
        None => return Err("not IP or ARP".to_owned()),
    }
    match &sliced.transport {
        Some(TransportSlice::Tcp(tcp)) => {
            p.proto = Proto::Tcp;
            p.src_port = Some(tcp.source_port());
            p.dst_port = Some(tcp.destination_port());
            p.tcp_seq = Some(tcp.sequence_number());
            p.tcp_flags = Some(TcpFlags {
                syn: tcp.syn(),
                ack: tcp.ack(),
                fin: tcp.fin(),
                rst: tcp.rst(),
                psh: tcp.psh(),
            });
            p.payload = tcp.payload().to_vec();
        }
        Some(TransportSlice::Udp(udp)) => {
            p.proto = Proto::Udp;
            p.src_port = Some(udp.source_port());
            p.dst_port = Some(udp.destination_port());
            p.payload = udp.payload().to_vec();
        }
        Some(TransportSlice::Icmpv4(icmp)) => {
            p.proto = Proto::Icmp;
            p.icmp_type = Some(icmp.type_u8());
            p.payload = icmp.payload().to_vec();
        }
        Some(TransportSlice::Icmpv6(icmp)) => {
            p.proto = Proto::Icmpv6;
            p.icmpv6_type = Some(icmp.type_u8());
            p.payload = icmp.payload().to_vec();
        }
        None => {}
    }
    Ok(p)
}

#[cfg(test)]
mod tests {
    use etherparse::PacketBuilder;
    use hickory_proto::op::Query;
    use hickory_proto::rr::{Name, RecordType};
    use pcap_file::pcap::{PcapHeader, PcapPacket, PcapWriter};

    use super::*;
    use crate::topology::{ALLOWED_V4, DNS_V4, SANDBOX_V4, SANDBOX_V6, UPSTREAM_MAC};

    fn dns_query(name: &str, t: RecordType) -> Vec<u8> {
        let mut m = Message::new(1, MessageType::Query, hickory_proto::op::OpCode::Query);
        m.add_query(Query::query(Name::from_ascii(name).unwrap(), t));
        m.to_vec().unwrap()
    }

    fn pcap(frames: &[Vec<u8>]) -> Vec<u8> {
        let header = PcapHeader {
            datalink: DataLink::ETHERNET,
            ..PcapHeader::default()
        };
        let mut w = PcapWriter::with_header(Vec::new(), header).unwrap();
        for (i, f) in frames.iter().enumerate() {
            let len = u32::try_from(f.len()).unwrap();
            w.write_packet(&PcapPacket::new(Duration::from_millis(i as u64), len, f))
                .unwrap();
        }
        w.into_writer()
    }

    fn v4(src_mac: [u8; 6]) -> etherparse::PacketBuilderStep<etherparse::IpHeaders> {
        PacketBuilder::ethernet2(src_mac, UPSTREAM_MAC).ipv4(
            SANDBOX_V4.octets(),
            DNS_V4.octets(),
            64,
        )
    }

    fn build(b: etherparse::PacketBuilderStep<etherparse::UdpHeader>, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    #[test]
    fn udp_and_tcp_dns_queries_are_found() {
        let udp = build(
            v4(SANDBOX_MAC).udp(40000, 53),
            &dns_query("allowed.test.", RecordType::A),
        );
        let q = dns_query("Exfil.Example.", RecordType::TXT);
        let mut framed = u16::try_from(q.len()).unwrap().to_be_bytes().to_vec();
        framed.extend_from_slice(&q);
        // TCP query split over two segments, the second one sent twice (retransmission).
        let seg = |seq: u32, data: &[u8]| {
            let mut out = Vec::new();
            v4(SANDBOX_MAC)
                .tcp(40001, 53, seq, 1000)
                .ack(1)
                .psh()
                .write(&mut out, data)
                .unwrap();
            out
        };
        let frames = vec![
            udp,
            seg(100, &framed[..5]),
            seg(105, &framed[5..]),
            seg(105, &framed[5..]),
        ];
        let cap = Capture::from_pcap(pcap(&frames).as_slice()).unwrap();
        assert_eq!(cap.packets.len(), 4);
        let src = IpAddr::from(SANDBOX_V4);
        assert_eq!(
            cap.dns_queries(),
            vec![
                (src, "allowed.test".to_owned(), "A".to_owned()),
                (src, "Exfil.Example".to_owned(), "TXT".to_owned()),
            ]
        );
    }

    #[test]
    fn garbage_to_port_53_is_still_a_query() {
        let udp = build(v4(SANDBOX_MAC).udp(40000, 53), b"\x00");
        let cap = Capture::from_pcap(pcap(&[udp]).as_slice()).unwrap();
        assert_eq!(
            cap.dns_queries(),
            vec![(
                IpAddr::from(SANDBOX_V4),
                String::new(),
                "INVALID".to_owned()
            )]
        );
    }

    #[test]
    fn fields_flags_and_housekeeping() {
        let mut syn = Vec::new();
        PacketBuilder::ethernet2(SANDBOX_MAC, UPSTREAM_MAC)
            .ipv4([10, 9, 9, 9], ALLOWED_V4.octets(), 64)
            .tcp(40002, 443, 7, 1000)
            .syn()
            .write(&mut syn, &[])
            .unwrap();
        let mut ns = Vec::new();
        PacketBuilder::ethernet2(SANDBOX_MAC, [0x33, 0x33, 0, 0, 0, 1])
            .ipv6(
                SANDBOX_V6.octets(),
                [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
                255,
            )
            .icmpv6(etherparse::Icmpv6Type::Unknown {
                type_u8: 135,
                code_u8: 0,
                bytes5to8: [0; 4],
            })
            .write(&mut ns, &[0; 16])
            .unwrap();
        let cap = Capture::from_pcap(pcap(&[syn, ns, vec![1, 2, 3]]).as_slice()).unwrap();
        assert_eq!(cap.packets.len(), 2);
        assert_eq!(cap.other_frames.len(), 1);
        let syn = &cap.packets[0];
        assert_eq!(
            (syn.proto, syn.src_port, syn.dst_port),
            (Proto::Tcp, Some(40002), Some(443))
        );
        assert!(syn.tcp_flags.unwrap().is_syn_only());
        assert!(syn.sent_by_sandbox() && !syn.is_housekeeping());
        let ns = &cap.packets[1];
        assert_eq!((ns.proto, ns.icmpv6_type), (Proto::Icmpv6, Some(135)));
        assert!(ns.is_housekeeping());
    }

    #[test]
    fn non_ethernet_captures_are_refused() {
        let header = PcapHeader {
            datalink: DataLink::RAW,
            ..PcapHeader::default()
        };
        let w = PcapWriter::with_header(Vec::new(), header).unwrap();
        assert!(Capture::from_pcap(w.into_writer().as_slice()).is_err());
    }
}
