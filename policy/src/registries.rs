//! `network.registries`: package registries by name. Each name stands for the hosts its
//! package manager reads from (index, API, file CDN), added to `network.allow`: read-only
//! like every allowed host (installs and downloads pass; `npm publish`, `cargo publish`,
//! `twine upload` are writes and are refused `read-only-host` unless the policy names the
//! host writable). The host lists are the registries' documented endpoints.

/// Every registry: its name and its hosts (host rules, no ports).
pub const REGISTRIES: &[(&str, &[&str])] = &[
    ("npm", &["registry.npmjs.org"]),
    ("yarn", &["registry.yarnpkg.com", "repo.yarnpkg.com"]),
    ("pypi", &["pypi.org", "files.pythonhosted.org"]),
    (
        "crates",
        &["crates.io", "index.crates.io", "static.crates.io"],
    ),
    ("go", &["proxy.golang.org", "sum.golang.org"]),
    ("rubygems", &["rubygems.org", "index.rubygems.org"]),
    ("maven", &["repo.maven.apache.org", "repo1.maven.org"]),
    ("debian", &["deb.debian.org", "security.debian.org"]),
];

/// The hosts of the registry `name`, if it is one.
#[must_use]
pub fn hosts(name: &str) -> Option<&'static [&'static str]> {
    REGISTRIES
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, hosts)| *hosts)
}

/// The names, for an error message.
#[must_use]
pub fn names() -> String {
    REGISTRIES
        .iter()
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rule::HostRule;

    #[test]
    fn every_host_is_a_portless_rule_and_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for (name, hosts) in REGISTRIES {
            assert!(seen.insert(*name), "{name} twice");
            assert!(!hosts.is_empty(), "{name}");
            for h in *hosts {
                let rule = HostRule::parse(h).unwrap_or_else(|e| panic!("{name}: {h}: {e}"));
                assert!(rule.port.is_none(), "{h}");
            }
        }
        assert_eq!(
            hosts("pypi"),
            Some(&["pypi.org", "files.pythonhosted.org"][..])
        );
        assert_eq!(hosts("PyPI"), None, "names are exact");
    }
}
