//! What the loader notes of where each list's rules came from, which the parsed policy
//! does not otherwise keep: read by [`crate::listing`] (`airlock policy show`). Decides
//! nothing.

/// The sources of the policy's lists, as the file wrote them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Provenance {
    /// How many of `network.allow` the file wrote (the registries' rules follow them).
    pub file_allow: usize,
    /// `network.registries`, in order: each name and how many allow rules it brought.
    pub registries: Vec<(String, usize)>,
    /// `[l7] presets`, by name, in order.
    pub presets: Vec<String>,
    /// `[[credentials]]`, in order: its preset, and whether the file wrote its hosts.
    pub credentials: Vec<(Option<String>, bool)>,
    /// The operator's grants applied over the file ([`crate::overlay`]), in order: each
    /// allow grant's rule ends `network.allow`, each deny grant's ends `network.deny`.
    pub overlay: Vec<crate::overlay::Grant>,
}
