//! Denial reasons: data, not errors.
//!
//! Every refusal the appliance makes carries one [`Reason`]. Its [`Reason::as_str`] is a
//! stable kebab-case code: it goes to the agent in the `x-airlock-error` header and the 403
//! body, and to the audit log's `reason` field. Codes are an interface: never rename one.
//! The set is declared with the workspace's one code generator
//! ([`airlock_channels::stable_codes!`], as the git API's snake_case reasons are).

airlock_channels::stable_codes! {
    /// Why a connection, request or lookup was refused.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
    pub enum Reason {
        /// No allow rule matches the host.
        BlockedByPolicy => "blocked-by-policy",
        /// A `network.deny` rule matches the host (deny wins over allow).
        DeniedByRule => "denied-by-rule",
        /// The address is private, loopback, link-local, multicast, reserved or a translation
        /// form (hard deny: no rule can allow it).
        BlockedPrivateAddress => "blocked-private-address",
        /// The address is a cloud metadata endpoint (hard deny: no rule can allow it).
        BlockedMetadataAddress => "blocked-metadata-address",
        /// The host is an IP literal that no exact rule lists.
        BlockedIpLiteral => "blocked-ip-literal",
        /// An allow rule matches the host, but not the port.
        BlockedPort => "blocked-port",
        /// The host is not a valid host (see `host::HostError`).
        InvalidHost => "invalid-host",
        /// The TLS server name differs from the CONNECT authority.
        SniMismatch => "sni-mismatch",
        /// The HTTP `Host` differs from the CONNECT authority or the TLS server name.
        HostMismatch => "host-mismatch",
        /// A transparently redirected connection whose host cannot be determined (no SNI, no
        /// `Host`).
        UnknownHost => "unknown-host",
        /// The allowed host did not resolve to a usable address.
        ResolveFailed => "resolve-failed",
        /// The allowed host resolved, but the connection to it failed.
        UpstreamUnreachable => "upstream-unreachable",
        /// The request could not be parsed as HTTP.
        MalformedRequest => "malformed-request",
        /// The request head exceeds the proxy's limits.
        RequestTooLarge => "request-too-large",
        /// A DNS question of a type the DNS filter does not answer.
        DnsQueryType => "dns-query-type",
        /// The agent holds more connections than the proxy allows.
        TooManyConnections => "too-many-connections",
        /// The agent sent more requests to one host than `[limits]` lets it (a token bucket
        /// per session and host), answered `429` with `Retry-After`.
        RateLimited => "rate-limited",
        /// The upstream failed `[limits] circuit_failures` times in a row: its circuit is
        /// open and requests to it are answered `503` at once until a probe succeeds.
        UpstreamCircuitOpen => "upstream-circuit-open",
        /// An hourly budget of `[limits]` is spent (bytes sent to the host by the session, by
        /// the sandbox, or the sandbox's requests): `429`, the budget and its reset named.
        BudgetExhausted => "budget-exhausted",
        /// No rule lists the host and the policy asks the operator about such hosts
        /// (`[network] unlisted = "ask"`): refused at once, and filed for approval (the
        /// answer names the item).
        ApprovalRequired => "approval-required",
        /// The operator denied the approval the host was filed for (the answer carries the
        /// operator's reason).
        ApprovalDenied => "approval-denied",
        /// A credential placeholder or a real secret was about to leave for a host it is not
        /// bound to.
        CredentialLeak => "credential-leak",
        /// A git push that did not come through the git API (or that the git rules refuse).
        GitPushBlocked => "git-push-blocked",
        /// An intercepted request matches a deny rule of `[[rules]]` (method and path), a
        /// preset's deny rule, or no allow rule of a host that has allow rules.
        RequestDeniedByRule => "request-denied-by-rule",
        /// The upstream's TLS certificate did not verify; the request was never sent.
        UpstreamCertificateInvalid => "upstream-certificate-invalid",
        /// A TLS handshake with the agent failed on an intercepted connection (e.g. the agent
        /// does not trust the appliance CA).
        ClientTlsFailed => "client-tls-failed",
        /// An `Upgrade` other than a `GET` with exactly `Upgrade: websocket` (`h2c`, `TLS/1.x`,
        /// anything else): the proxy would lose sight of the connection after a `101`.
        UpgradeNotSupported => "upgrade-not-supported",
        /// A WebSocket upgrade on a host where a credential is bound or L7 rules apply: after the
        /// `101` no rule, leak scan or scrubber would see the frames.
        UpgradeDenied => "upgrade-denied",
        /// A method that echoes the request (`TRACE`, `TRACK`) or opens a tunnel (`CONNECT`
        /// inside an intercepted connection) on a host a credential is bound to: a credential
        /// is never injected into it.
        CredentialMethodRefused => "credential-method-refused",
        /// The audit log cannot be written (full volume, write error): nothing is served
        /// unaudited, so every request is refused until writing works again.
        AuditUnavailable => "audit-unavailable",
        /// A TLS ClientHello carrying Encrypted ClientHello on a connection the proxy does not
        /// decrypt: the real destination would be hidden behind the allowed outer name.
        EchRefused => "ech-refused",
        /// A credential of a known format (a secret detector's match) or a value of the
        /// workspace's secret files on its way to a host that is not its provider's: in a
        /// request, or in a name the agent asks to resolve.
        ForeignSecret => "foreign-secret",
        /// A name under a wildcard allow whose labels below the wildcard zone look like an
        /// encoded payload, or whose zone has carried more query-name bytes this session than
        /// the budget: data leaving through the resolver (asked of the DNS filter, or
        /// resolved by the proxy for a connection or request).
        DnsExfilSuspect => "dns-exfil-suspect",
        /// A method that writes (anything but `GET`, `HEAD`, `OPTIONS` and git fetches) to a
        /// host the policy does not name writable (`network.writable`, an `allow` rule).
        ReadOnlyHost => "read-only-host",
        /// A raw (neither TLS nor HTTP) stream to a host the proxy must inspect: only a
        /// `network.passthrough` host is tunnelled without being read.
        NotInspectable => "not-inspectable",
        /// A request a credential of the policy would have authenticated, while that
        /// credential was not configured when the sandbox started (its variable unset, its
        /// secret file absent): the answer names it and how the operator provides it.
        CredentialMissing => "credential-missing",
        /// A request body carrying a long base64 or hex run, to a host outside the LLM APIs,
        /// where the policy's `[signals] encoded_blob = "deny"` turns the signal into a refusal.
        EncodedBlob => "encoded-blob",
        /// A high-entropy (compressed or encrypted-looking) request body, to a host outside
        /// the LLM APIs, where the policy's `[signals] high_entropy = "deny"` refuses it.
        HighEntropy => "high-entropy",
        /// A request body in a `Content-Encoding` the proxy cannot read (it decodes gzip,
        /// deflate, br and zstd), or an upstream's answer in one the request did not ask
        /// for: what cannot be read cannot be searched for secrets.
        ContentEncodingUnsupported => "content-encoding-unsupported",
        /// A compressed body that expands past what the proxy decodes (more than 256 times
        /// the compressed bytes after the first MiB, or 64 MiB for a request): refused, never
        /// expanded without limit.
        DecompressionBomb => "decompression-bomb",
        /// A request on the git service port without the git API's ticket (the header the
        /// git API gives every network git command it runs): whoever sent it is not the
        /// git API.
        GitTicketMissing => "git-ticket-missing",
        /// A git service port ticket that does not verify (forged, altered, sealed with
        /// another start's key, malformed) or is not for this request (another repository,
        /// a fetch ticket on a push).
        GitTicketInvalid => "git-ticket-invalid",
        /// A git service port ticket past its expiry, or issued before the proxy started.
        GitTicketExpired => "git-ticket-expired",
        /// A push ticket whose ref updates were already taken once.
        GitTicketReplayed => "git-ticket-replayed",
        /// A push on the git service port carrying a ref update (ref, old, new) that its
        /// ticket does not sign: the git API did not judge it.
        GitRefUpdateUnsigned => "git-ref-update-unsigned",
        /// A push on the git service port carrying a ref update the git rules refuse
        /// whatever signed it: a deletion, a tag, a protected branch or a branch outside the
        /// sandbox's own.
        GitRefUpdateRefused => "git-ref-update-refused",
        /// A push on the git service port whose ref-update commands cannot be read (bad
        /// pkt-lines, too long, encoded, signed pushes).
        GitPushMalformed => "git-push-malformed",
        /// A read (`GET`, `HEAD`, `OPTIONS`) carrying a body to a read-only host: a body is
        /// what a write sends, and an upstream that ignores a read's body may take it for
        /// the next request.
        BodyOnRead => "body-on-read",
    }
}

impl Reason {
    /// One sentence for the user: how an operator would allow this, or why nobody can.
    #[must_use]
    pub const fn hint(&self) -> &'static str {
        match self {
            Reason::BlockedByPolicy
            | Reason::DeniedByRule
            | Reason::BlockedPrivateAddress
            | Reason::BlockedMetadataAddress
            | Reason::BlockedIpLiteral
            | Reason::BlockedPort
            | Reason::InvalidHost
            | Reason::SniMismatch
            | Reason::HostMismatch
            | Reason::UnknownHost
            | Reason::ResolveFailed
            | Reason::UpstreamUnreachable
            | Reason::MalformedRequest
            | Reason::RequestTooLarge
            | Reason::DnsQueryType
            | Reason::TooManyConnections
            | Reason::RateLimited
            | Reason::UpstreamCircuitOpen
            | Reason::BudgetExhausted
            | Reason::ApprovalRequired
            | Reason::ApprovalDenied => self.connection_hint(),
            Reason::CredentialLeak
            | Reason::GitPushBlocked
            | Reason::RequestDeniedByRule
            | Reason::UpstreamCertificateInvalid
            | Reason::ClientTlsFailed
            | Reason::UpgradeNotSupported
            | Reason::UpgradeDenied
            | Reason::ContentEncodingUnsupported
            | Reason::DecompressionBomb
            | Reason::CredentialMethodRefused
            | Reason::AuditUnavailable
            | Reason::EchRefused
            | Reason::ForeignSecret
            | Reason::DnsExfilSuspect
            | Reason::ReadOnlyHost
            | Reason::NotInspectable
            | Reason::CredentialMissing
            | Reason::EncodedBlob
            | Reason::HighEntropy
            | Reason::BodyOnRead => self.request_hint(),
            Reason::GitTicketMissing
            | Reason::GitTicketInvalid
            | Reason::GitTicketExpired
            | Reason::GitTicketReplayed
            | Reason::GitRefUpdateUnsigned
            | Reason::GitRefUpdateRefused
            | Reason::GitPushMalformed => self.git_hint(),
        }
    }

    /// [`Reason::hint`] for a refused host, address or connection.
    const fn connection_hint(&self) -> &'static str {
        match self {
            Reason::BlockedByPolicy => {
                "Ask the operator to add the host to network.allow in the policy file \
                 (e.g. \"example.com\" or \"*.example.com\")."
            }
            Reason::DeniedByRule => {
                "An entry in network.deny matches this host and deny wins over allow; \
                 the operator must remove or narrow that entry."
            }
            Reason::BlockedPrivateAddress => {
                "Private, loopback, link-local, multicast and reserved addresses are always \
                 blocked and no policy can allow them; use a public address."
            }
            Reason::BlockedMetadataAddress => {
                "Cloud metadata endpoints are always blocked and no policy can allow them."
            }
            Reason::BlockedIpLiteral => {
                "Use the host name, or ask the operator to list the exact address in \
                 network.allow (e.g. \"203.0.113.7\" or \"[2001:db8::1]:8443\")."
            }
            Reason::BlockedPort => {
                "The host is allowed on other ports; ask the operator to add \
                 \"host:port\" to network.allow (a rule without a port allows 80 and 443 only)."
            }
            Reason::InvalidHost => {
                "Use a valid host name; malformed hosts are never allowed by any policy."
            }
            Reason::SniMismatch => {
                "Send a TLS server name equal to the host given to the proxy; domain \
                 fronting is never allowed."
            }
            Reason::HostMismatch => {
                "Send a Host header equal to the connection's target host; domain fronting \
                 is never allowed."
            }
            Reason::UnknownHost => {
                "Use the HTTP(S) proxy (HTTPS_PROXY) or a client that sends TLS SNI or an \
                 HTTP Host header, so the destination can be checked against the policy."
            }
            Reason::ResolveFailed => {
                "The host is allowed but did not resolve to a public address; check its \
                 name and the container's DNS."
            }
            Reason::UpstreamUnreachable => {
                "The host is allowed but did not accept the connection; check that it is up \
                 and reachable from the container's network."
            }
            Reason::MalformedRequest => {
                "Send a well-formed HTTP request; the proxy could not parse this one."
            }
            Reason::RequestTooLarge => {
                "Make the request head smaller; the proxy's size limits are fixed."
            }
            Reason::DnsQueryType => {
                "Only address lookups (A, AAAA) are answered; use the HTTP(S) proxy for \
                 everything else."
            }
            Reason::TooManyConnections => {
                "Close idle connections or retry later; the proxy caps concurrent connections."
            }
            Reason::RateLimited => {
                "Slow down and retry after the Retry-After seconds; the policy's [limits] \
                 requests_per_second and request_burst bound requests per host."
            }
            Reason::UpstreamCircuitOpen => {
                "The upstream kept failing (connection refused or 5xx); retry after the \
                 cool-down ([limits] circuit_cooldown_seconds), when one probe is let through."
            }
            Reason::BudgetExhausted => {
                "An hourly budget of the policy's [limits] is spent (the rule names it and when \
                 it resets); wait for the reset or ask the operator to raise it."
            }
            Reason::ApprovalRequired => {
                "The host is not in the policy and waits for the operator's approval (its \
                 approval_id is in this answer); retry once it is approved."
            }
            Reason::ApprovalDenied => {
                "The operator denied this host for this session (the rule gives the reason); \
                 do not retry it."
            }
            _ => "",
        }
    }

    /// [`Reason::hint`] for a refused request (what it carried, where, how).
    const fn request_hint(&self) -> &'static str {
        match self {
            Reason::CredentialLeak => {
                "Credentials are only sent to the hosts the operator bound them to in the \
                 policy's [[credentials]] hosts; do not send them anywhere else."
            }
            Reason::GitPushBlocked => {
                "Push with the git command in the sandbox to a branch the policy's [git] \
                 push_branches allow."
            }
            Reason::RequestDeniedByRule => {
                "The policy's [[rules]] (or a preset) do not allow this method and path on \
                 this host; the operator can change the rules if the request is legitimate."
            }
            Reason::UpstreamCertificateInvalid => {
                "The upstream's certificate did not verify against the trusted roots; the \
                 request was not sent (add the host to network.passthrough only if it is pinned)."
            }
            Reason::ClientTlsFailed => {
                "Trust the appliance CA (SSL_CERT_FILE and friends point at its bundle) or \
                 use the plain-HTTP base-URL form of the proxy."
            }
            Reason::UpgradeNotSupported => {
                "Only WebSocket upgrades (GET with Upgrade: websocket) are relayed; use \
                 HTTP/1.1 without an upgrade (h2c and TLS upgrades are never relayed)."
            }
            Reason::UpgradeDenied => {
                "WebSockets are refused on hosts where a credential is bound or L7 rules \
                 apply (and on read-only hosts); use plain HTTP requests to this host, or the \
                 operator can list it in network.websocket, where the proxy reads the frames \
                 (leak scan, secret detectors, scrubbing)."
            }
            Reason::CredentialMethodRefused => {
                "TRACE, TRACK and CONNECT are never sent to a host a credential is bound to; \
                 use an ordinary method."
            }
            Reason::AuditUnavailable => {
                "The audit log cannot be written (the audit volume may be full); the operator \
                 must free space on it, and requests are served again as soon as it works."
            }
            Reason::EchRefused => {
                "Encrypted ClientHello would hide the real destination in a tunnel the proxy \
                 does not decrypt; turn ECH off in the client (Chromium: \
                 --disable-features=EncryptedClientHello) or ask the operator to intercept the host."
            }
            Reason::ForeignSecret => {
                "The request (or the name it asks to resolve) carries what looks like another \
                 service's credential or a value of the workspace's secret files (the rule \
                 names the detector); it may only go to that service's hosts. Remove it."
            }
            Reason::DnsExfilSuspect => {
                "The name's labels under a wildcard-allowed zone look like encoded data (long, \
                 random-looking labels, or more name bytes to the zone than the session's \
                 budget); resolve ordinary names, or ask the operator to list this exact name."
            }
            Reason::ReadOnlyHost => {
                "This host accepts only GET, HEAD, OPTIONS and git fetches; the operator can \
                 list it in the policy's network.writable, or allow this method and path with \
                 an action = \"allow\" rule in [[rules]]."
            }
            Reason::BodyOnRead => {
                "This host is read-only and a GET, HEAD or OPTIONS request sends no body to \
                 it; send the request without a body (parameters go in the query string), or \
                 the operator can list the host in the policy's network.writable."
            }
            Reason::NotInspectable => {
                "The proxy reads every connection to check its methods and secrets, and this \
                 one is neither TLS nor HTTP; the operator can list the host in the policy's \
                 network.passthrough to tunnel it unread."
            }
            Reason::CredentialMissing => {
                "The credential this host needs was not configured when the sandbox started; \
                 the operator provides it (the answer's message says how) and starts the \
                 sandbox again."
            }
            Reason::ContentEncodingUnsupported => {
                "The proxy reads gzip, deflate, br and zstd bodies (it must read a body to \
                 search it for secrets); send the body uncompressed or in one of those."
            }
            Reason::DecompressionBomb => {
                "The compressed body expands far past its size; send it uncompressed, or in \
                 parts."
            }
            Reason::EncodedBlob => {
                "The body carries a long base64 or hex run (encoded data) and the policy \
                 refuses that for this host; send the data as is, or the operator can set \
                 [signals] encoded_blob = \"log\" or raise blob_min_bytes."
            }
            Reason::HighEntropy => {
                "The body looks compressed or encrypted and the policy refuses that for this \
                 host; send it uncompressed, or the operator can set [signals] high_entropy \
                 = \"log\" or raise entropy_min_bytes."
            }
            _ => "",
        }
    }

    /// [`Reason::hint`] for a refusal on the git service port (only the git API uses it).
    const fn git_hint(&self) -> &'static str {
        match self {
            Reason::GitTicketMissing
            | Reason::GitTicketInvalid
            | Reason::GitTicketExpired
            | Reason::GitTicketReplayed => {
                "Only the git API's own git commands use the git service port; run git \
                 fetch and git push with the git command in the sandbox (a push or fetch that \
                 took longer than the ticket's life is simply run again)."
            }
            Reason::GitRefUpdateUnsigned => {
                "The git service port takes only the ref updates the git API judged; push \
                 with the git command in the sandbox, and if the remote branch moved since \
                 the last fetch, run git fetch and push again."
            }
            Reason::GitRefUpdateRefused => {
                "Pushes never delete, tag, or touch protected branches or branches outside \
                 the sandbox's own; push to a branch the policy's [git] push_branches allow \
                 and open a pull request."
            }
            Reason::GitPushMalformed => {
                "The push's ref-update commands could not be read; push with the git command \
                 in the sandbox (signed pushes are not carried)."
            }
            _ => "",
        }
    }

    /// Hard denies (metadata and private addresses) hold even in report mode and can
    /// never be overridden by a rule or an approval.
    #[must_use]
    pub const fn is_hard_deny(&self) -> bool {
        matches!(
            self,
            Reason::BlockedPrivateAddress | Reason::BlockedMetadataAddress
        )
    }
}

impl serde::Serialize for Reason {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// A reader of the audit log gets the typed reason back from its code; any other string is
/// an error naming it.
impl<'de> serde::Deserialize<'de> for Reason {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let code = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        code.parse()
            .map_err(|()| serde::de::Error::custom(format!("unknown refusal code {code:?}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn codes_are_unique_kebab_case_and_hints_are_one_sentence() {
        let mut seen = HashSet::new();
        for r in Reason::ALL {
            let code = r.as_str();
            assert!(seen.insert(code), "duplicate code {code}");
            assert_eq!(code.parse::<Reason>(), Ok(r), "the code reads back");
            let json = serde_json::to_string(&r).unwrap_or_default();
            assert_eq!(
                serde_json::from_str::<Reason>(&json).ok(),
                Some(r),
                "{json}"
            );
            assert!(
                code.bytes().all(|b| b.is_ascii_lowercase() || b == b'-'),
                "{code}"
            );
            assert_eq!(r.to_string(), code);
            let hint = r.hint();
            assert!(hint.ends_with('.'), "{code}: {hint}");
            assert!(
                !hint.contains("  ") && !hint.contains('\n'),
                "{code}: {hint}"
            );
        }
        assert_eq!(seen.len(), Reason::ALL.len());
    }

    #[test]
    fn serializes_as_its_code() {
        for r in Reason::ALL {
            assert_eq!(
                serde_json::to_string(&r).unwrap(),
                format!("\"{}\"", r.as_str())
            );
        }
        assert!(Reason::BlockedMetadataAddress.is_hard_deny());
        assert!(Reason::BlockedPrivateAddress.is_hard_deny());
        assert!(!Reason::BlockedByPolicy.is_hard_deny());
    }

    #[test]
    fn codes_are_stable() {
        // These strings are an interface (header, audit log): this test pins them.
        let pinned = [
            (Reason::BlockedByPolicy, "blocked-by-policy"),
            (Reason::DeniedByRule, "denied-by-rule"),
            (Reason::BlockedPrivateAddress, "blocked-private-address"),
            (Reason::BlockedMetadataAddress, "blocked-metadata-address"),
            (Reason::BlockedIpLiteral, "blocked-ip-literal"),
            (Reason::BlockedPort, "blocked-port"),
            (Reason::InvalidHost, "invalid-host"),
            (Reason::SniMismatch, "sni-mismatch"),
            (Reason::HostMismatch, "host-mismatch"),
            (Reason::UnknownHost, "unknown-host"),
            (Reason::ResolveFailed, "resolve-failed"),
            (Reason::UpstreamUnreachable, "upstream-unreachable"),
            (Reason::MalformedRequest, "malformed-request"),
            (Reason::RequestTooLarge, "request-too-large"),
            (Reason::DnsQueryType, "dns-query-type"),
            (Reason::TooManyConnections, "too-many-connections"),
            (Reason::RateLimited, "rate-limited"),
            (Reason::UpstreamCircuitOpen, "upstream-circuit-open"),
            (Reason::BudgetExhausted, "budget-exhausted"),
            (Reason::ApprovalRequired, "approval-required"),
            (Reason::ApprovalDenied, "approval-denied"),
            (Reason::UpgradeNotSupported, "upgrade-not-supported"),
            (Reason::UpgradeDenied, "upgrade-denied"),
            (Reason::CredentialMethodRefused, "credential-method-refused"),
            (Reason::AuditUnavailable, "audit-unavailable"),
            (Reason::EchRefused, "ech-refused"),
            (Reason::ForeignSecret, "foreign-secret"),
            (Reason::DnsExfilSuspect, "dns-exfil-suspect"),
            (Reason::ReadOnlyHost, "read-only-host"),
            (Reason::NotInspectable, "not-inspectable"),
            (Reason::CredentialMissing, "credential-missing"),
            (Reason::EncodedBlob, "encoded-blob"),
            (Reason::HighEntropy, "high-entropy"),
            (
                Reason::ContentEncodingUnsupported,
                "content-encoding-unsupported",
            ),
            (Reason::DecompressionBomb, "decompression-bomb"),
            (Reason::GitTicketMissing, "git-ticket-missing"),
            (Reason::GitTicketInvalid, "git-ticket-invalid"),
            (Reason::GitTicketExpired, "git-ticket-expired"),
            (Reason::GitTicketReplayed, "git-ticket-replayed"),
            (Reason::GitRefUpdateUnsigned, "git-ref-update-unsigned"),
            (Reason::GitRefUpdateRefused, "git-ref-update-refused"),
            (Reason::GitPushMalformed, "git-push-malformed"),
            (Reason::BodyOnRead, "body-on-read"),
        ];
        for (r, s) in pinned {
            assert_eq!(r.as_str(), s);
        }
    }
}
