use super::*;

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn raw(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

fn br(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    {
        let mut w = brotli::CompressorWriter::new(&mut out, 4096, 5, 22);
        w.write_all(data).unwrap();
    }
    out
}

fn zst(data: &[u8]) -> Vec<u8> {
    zstd::encode_all(data, 3).unwrap()
}

fn text() -> Vec<u8> {
    (0..3000)
        .map(|i| format!("line {i}: some text that compresses\n"))
        .collect::<String>()
        .into_bytes()
}

/// Each coding decodes whole and fed in pieces of any size, to the same bytes.
#[test]
fn every_coding_round_trips_in_any_pieces() {
    let data = text();
    let cases: [(Coding, Vec<u8>); 5] = [
        (Coding::Gzip, gzip(&data)),
        (Coding::Deflate, zlib(&data)),
        (Coding::Deflate, raw(&data)),
        (Coding::Brotli, br(&data)),
        (Coding::Zstd, zst(&data)),
    ];
    for (coding, coded) in &cases {
        assert_eq!(
            decode_all(&[*coding], coded, REQUEST).unwrap(),
            data,
            "{coding:?}"
        );
        for piece in [1, 2, 7, 1000] {
            let mut d = Decoder::new(&[*coding], REQUEST).unwrap();
            let mut out = Vec::new();
            for p in coded.chunks(piece) {
                out.extend(d.feed(p).unwrap());
            }
            out.extend(d.finish().unwrap());
            assert_eq!(out, data, "{coding:?} in pieces of {piece}");
        }
    }
    // Two members of gzip are one stream; gzip then br is undone br first.
    let mut two = gzip(b"first ");
    two.extend(gzip(b"second"));
    assert_eq!(
        decode_all(&[Coding::Gzip], &two, REQUEST).unwrap(),
        b"first second"
    );
    let layered = br(&gzip(&data));
    assert_eq!(
        decode_all(&[Coding::Gzip, Coding::Brotli], &layered, REQUEST).unwrap(),
        data
    );
}

/// Zeros expand a thousand times in gzip and far more in br and zstd: each is refused at
/// the bound, and no output past the bound is ever held.
#[test]
fn a_decompression_bomb_is_refused_at_the_bound() {
    let zeros = vec![0u8; 32 << 20];
    let small = Bounds {
        floor: 64 * 1024,
        ratio: 256,
        total: 8 << 20,
    };
    for (coding, coded) in [
        (Coding::Gzip, gzip(&zeros)),
        (Coding::Brotli, br(&zeros)),
        (Coding::Zstd, zst(&zeros)),
    ] {
        let mut d = Decoder::new(&[coding], small).unwrap();
        let mut held = 0u64;
        let mut result = Ok(());
        for p in coded.chunks(100) {
            match d.feed(p) {
                Ok(out) => held += out.len() as u64,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        assert_eq!(result, Err(DecodeError::Bomb), "{coding:?}");
        assert!(
            held <= small.allowed(coded.len() as u64),
            "{coding:?}: {held}"
        );
        // Failed stays failed.
        assert_eq!(d.feed(b"more"), Err(DecodeError::Bomb));
    }
    // gzip of gzip of zeros: the outer layer is small, the inner one is the bomb.
    let nested = gzip(&gzip(&zeros));
    assert_eq!(
        decode_all(&[Coding::Gzip, Coding::Gzip], &nested, REQUEST),
        Err(DecodeError::Bomb)
    );
    // The same bytes an honest amount at a time are fine within the floor.
    assert!(decode_all(&[Coding::Gzip], &gzip(&zeros[..4096]), small).is_ok());
}

#[test]
fn corrupt_and_cut_streams_are_errors() {
    let coded = gzip(&text());
    assert!(matches!(
        decode_all(&[Coding::Gzip], &coded[..coded.len() / 2], REQUEST),
        Err(DecodeError::Corrupt(_))
    ));
    assert!(matches!(
        decode_all(&[Coding::Brotli], b"not brotli at all", REQUEST),
        Err(DecodeError::Corrupt(_))
    ));
    assert!(matches!(
        decode_all(&[Coding::Zstd], b"\x28\xb5\x2f\xfd garbage", REQUEST),
        Err(DecodeError::Corrupt(_))
    ));
    assert_eq!(decode_all(&[], b"as is", REQUEST).unwrap(), b"as is");
}

fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.append(
            http::header::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            HeaderValue::from_str(v).unwrap(),
        );
    }
    h
}

#[test]
fn content_encoding_lists_are_read_in_order_and_unknown_ones_refused() {
    let c = |v: &[(&str, &str)]| codings(&headers(v));
    assert_eq!(c(&[]).unwrap(), []);
    assert_eq!(c(&[("content-encoding", "identity")]).unwrap(), []);
    assert_eq!(
        c(&[
            ("content-encoding", "gzip, BR"),
            ("content-encoding", "x-gzip")
        ])
        .unwrap(),
        [Coding::Gzip, Coding::Brotli, Coding::Gzip]
    );
    assert_eq!(
        c(&[("content-encoding", "compress")]),
        Err(Unsupported("compress".into()))
    );
    assert!(c(&[("content-encoding", "gzip, gzip, gzip, gzip")]).is_err());
}

#[test]
fn accept_encoding_keeps_only_what_the_proxy_reads() {
    let rewrite = |pairs: &[(&str, &str)]| {
        let mut h = headers(pairs);
        restrict_accept_encoding(&mut h);
        h.get(http::header::ACCEPT_ENCODING)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned()
    };
    assert_eq!(
        rewrite(&[("accept-encoding", "gzip, deflate, br, zstd")]),
        "gzip, deflate, br, zstd"
    );
    assert_eq!(
        rewrite(&[("accept-encoding", "compress, x-bzip2, gzip;q=0.5, *")]),
        "gzip;q=0.5"
    );
    assert_eq!(
        rewrite(&[("accept-encoding", "br;q=0, compress")]),
        "identity"
    );
    assert_eq!(
        rewrite(&[]),
        "identity",
        "absent lets the server choose anything"
    );
    assert_eq!(
        rewrite(&[("accept-encoding", "gzip"), ("range", "bytes=0-9")]),
        "identity"
    );
}

#[test]
fn a_decoded_message_says_so_in_its_headers() {
    let mut h = headers(&[
        ("content-encoding", "gzip"),
        ("content-length", "120"),
        ("etag", "\"abc\""),
        ("accept-ranges", "bytes"),
        ("content-digest", "sha-256=:x:"),
        ("content-type", "application/json"),
    ]);
    mark_decoded(&mut h);
    assert_eq!(h.len(), 2, "{h:?}");
    assert_eq!(h.get("etag").unwrap(), "W/\"abc\"");
    let mut weak = headers(&[("etag", "W/\"abc\"")]);
    mark_decoded(&mut weak);
    assert_eq!(weak.get("etag").unwrap(), "W/\"abc\"");
}
