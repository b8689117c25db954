//! A sandbox's named volumes and its set-up container.
//!
//! Two volumes belong to a CLI sandbox, labelled with its data directory, its name and their
//! role ([`Role`]) so that `destroy` and `gc` find them:
//! - `airlock-home-<name>` ([`Role::Home`]): the agent's home, mounted at `/home/agent` in
//!   place of the tmpfs, so the agent's conversations, history and tools survive `stop` and
//!   `start` (only what the agent itself wrote: the per-start placeholders, session key and
//!   CA are on `/run`, a tmpfs);
//! - `airlock-secrets-<name>` ([`Role::Secrets`]): the sandbox's secrets, each a file owned
//!   by root (uid 0 as the engine writes it) with mode 0400, mounted read-only at
//!   `/run/secrets`. The engine writes them from a tar the CLI sends ([`Engine::put_files`]),
//!   so they are root's inside the container whatever user runs the CLI (root, a member of
//!   the docker group, a rootless engine's user) and whoever owns the operator's file.
//!
//! The volumes are filled through a set-up container ([`Engine::setup_container`]): created
//! from the sandbox's image with the secrets volume mounted, never started, removed at once.
//! It also reads the image's policy before the sandbox's container is made.

use super::{Engine, EngineError, LABEL_DATA, LABEL_SANDBOX, call, is_404};
use bollard::models::{ContainerCreateBody, HostConfig, VolumeCreateOptions};
use bollard::query_parameters::{
    CreateContainerOptions, ListVolumesOptions, RemoveVolumeOptions, UploadToContainerOptions,
};
use std::collections::HashMap;

/// The label naming what a volume or helper container is for.
pub const LABEL_ROLE: &str = "dev.airlock.role";

/// Where the set-up container mounts the secrets volume.
pub const SETUP_SECRETS: &str = "/airlock-secrets";

/// What a sandbox's volume holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// The agent's home.
    Home,
    /// Its secrets.
    Secrets,
}

impl Role {
    /// The label value and the volume name's middle part.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Home => "home",
            Role::Secrets => "secrets",
        }
    }

    /// The volume of sandbox `name` in this role: `airlock-<role>-<name>`.
    pub fn volume(self, name: &str) -> String {
        format!("airlock-{}-{name}", self.as_str())
    }
}

/// The name of the set-up container of sandbox `name` (a `.` no sandbox name holds).
pub fn setup_name(name: &str) -> String {
    format!("airlock-{name}.setup")
}

fn labels(data: &str, name: &str, role: &str) -> HashMap<String, String> {
    HashMap::from([
        (LABEL_DATA.to_string(), data.to_string()),
        (LABEL_SANDBOX.to_string(), name.to_string()),
        (LABEL_ROLE.to_string(), role.to_string()),
    ])
}

/// One file for [`Engine::put_files`]: its name in the directory, its content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RootFile {
    /// A plain name (no `/`).
    pub name: String,
    /// The bytes.
    pub content: Vec<u8>,
}

/// A tar stream of `files`, each root's (uid and gid 0) with mode 0400, after the directory
/// itself (`./`, root's, 0700). Pure.
pub fn root_only_tar(files: &[RootFile]) -> std::io::Result<Vec<u8>> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut b = tar::Builder::new(Vec::new());
    let mut dir = tar::Header::new_gnu();
    dir.set_entry_type(tar::EntryType::Directory);
    dir.set_mode(0o700);
    dir.set_uid(0);
    dir.set_gid(0);
    dir.set_size(0);
    b.append_data(&mut dir, "./", std::io::empty())?;
    for f in files {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Regular);
        h.set_mode(0o400);
        h.set_uid(0);
        h.set_gid(0);
        h.set_size(f.content.len() as u64);
        h.set_mtime(now);
        b.append_data(&mut h, &f.name, f.content.as_slice())?;
    }
    b.into_inner()
}

impl Engine {
    /// Create (or find) the volume of sandbox `name` in `role`, labelled with `data`.
    pub async fn create_volume(
        &self,
        data: &str,
        name: &str,
        role: Role,
    ) -> Result<String, EngineError> {
        let volume = role.volume(name);
        let opts = VolumeCreateOptions {
            name: Some(volume.clone()),
            labels: Some(labels(data, name, role.as_str())),
            ..Default::default()
        };
        self.docker
            .create_volume(opts)
            .await
            .map_err(call("create the volume", &volume))?;
        Ok(volume)
    }

    /// Remove the volume `volume`; one already gone is fine.
    pub async fn remove_volume(&self, volume: &str) -> Result<(), EngineError> {
        let opts = RemoveVolumeOptions { force: true };
        match self.docker.remove_volume(volume, Some(opts)).await {
            Err(e) if !is_404(&e) => Err(call("remove the volume", volume)(e)),
            _ => Ok(()),
        }
    }

    /// Remove the volume `volume` unless a container uses it: `Ok(false)` then (the engine
    /// answers 409), `Ok(true)` when it is removed or already gone.
    pub async fn remove_volume_if_unused(&self, volume: &str) -> Result<bool, EngineError> {
        let opts = RemoveVolumeOptions { force: true };
        match self.docker.remove_volume(volume, Some(opts)).await {
            Err(bollard::errors::Error::DockerResponseServerError {
                status_code: 409, ..
            }) => Ok(false),
            Err(e) if !is_404(&e) => Err(call("remove the volume", volume)(e)),
            _ => Ok(true),
        }
    }

    /// The volumes labelled with the data directory `data`: `(volume, sandbox)`.
    pub async fn volumes_of(&self, data: &str) -> Result<Vec<(String, String)>, EngineError> {
        let opts = ListVolumesOptions {
            filters: Some(HashMap::from([(
                "label".to_string(),
                vec![format!("{LABEL_DATA}={data}")],
            )])),
        };
        let list = self
            .docker
            .list_volumes(Some(opts))
            .await
            .map_err(call("list the volumes of", data))?;
        Ok(list
            .volumes
            .unwrap_or_default()
            .into_iter()
            .map(|v| {
                let sandbox = v.labels.get(LABEL_SANDBOX).cloned().unwrap_or_default();
                (v.name, sandbox)
            })
            .collect())
    }

    /// Create (not start) the set-up container of sandbox `name` from `image`, with the
    /// volume `secrets` (if any) at [`SETUP_SECRETS`] and no network; returns its id.
    pub async fn setup_container(
        &self,
        data: &str,
        name: &str,
        image: &str,
        secrets: Option<&str>,
    ) -> Result<String, EngineError> {
        let container = setup_name(name);
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            labels: Some(labels(data, name, "setup")),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                binds: secrets.map(|v| vec![format!("{v}:{SETUP_SECRETS}")]),
                network_mode: Some("none".into()),
                cap_drop: Some(vec!["ALL".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let opts = CreateContainerOptions {
            name: Some(container.clone()),
            platform: String::new(),
        };
        let r = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(call("create", &container))?;
        Ok(r.id)
    }

    /// Run `argv` as root in a throwaway container of `image` (no network, no capability but
    /// what moving files of other users needs) with the host directory `dir` at `/d`;
    /// returns its exit code. For what the CLI's own user may not do in its data directory
    /// (a non-root CLI: the sandbox's audit directory belongs to the proxy's user).
    pub async fn as_root_in(
        &self,
        data: &str,
        name: &str,
        image: &str,
        dir: &str,
        argv: &[&str],
    ) -> Result<i64, EngineError> {
        let container = format!("airlock-{name}.chore");
        let body = ContainerCreateBody {
            image: Some(image.to_string()),
            entrypoint: Some(argv.iter().map(|s| s.to_string()).collect()),
            labels: Some(labels(data, name, "chore")),
            network_disabled: Some(true),
            host_config: Some(HostConfig {
                binds: Some(vec![format!("{dir}:/d")]),
                network_mode: Some("none".into()),
                cap_drop: Some(vec!["ALL".into()]),
                cap_add: Some(vec!["DAC_OVERRIDE".into(), "FOWNER".into()]),
                ..Default::default()
            }),
            ..Default::default()
        };
        let opts = CreateContainerOptions {
            name: Some(container.clone()),
            platform: String::new(),
        };
        let id = self
            .docker
            .create_container(Some(opts), body)
            .await
            .map_err(call("create", &container))?
            .id;
        let ran = async {
            self.start(&id).await?;
            self.wait_exit(&id).await
        }
        .await;
        let _ = self.remove(&id).await;
        ran
    }

    /// Write `files` into the directory `dir` of the container `id` (created or running),
    /// each root's with mode 0400 ([`root_only_tar`]).
    pub async fn put_files(
        &self,
        id: &str,
        dir: &str,
        files: &[RootFile],
    ) -> Result<(), EngineError> {
        let tar = root_only_tar(files).map_err(|e| EngineError::Archive {
            name: id.into(),
            why: e.to_string(),
        })?;
        let opts = UploadToContainerOptions {
            path: dir.to_string(),
            no_overwrite_dir_non_dir: Some("true".into()),
            copy_uidgid: None,
        };
        self.docker
            .upload_to_container(id, Some(opts), bollard::body_full(tar.into()))
            .await
            .map_err(call("write the secrets into", id))
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_secrets_tar_holds_root_only_files_in_a_root_only_directory() {
        let tar = root_only_tar(&[RootFile {
            name: "github_token".into(),
            content: b"ghp_x".to_vec(),
        }])
        .unwrap();
        let mut a = tar::Archive::new(tar.as_slice());
        let mut seen = Vec::new();
        for e in a.entries().unwrap() {
            let mut e = e.unwrap();
            let h = e.header().clone();
            let mut body = Vec::new();
            std::io::Read::read_to_end(&mut e, &mut body).unwrap();
            seen.push((
                e.path().unwrap().display().to_string(),
                h.mode().unwrap(),
                h.uid().unwrap(),
                h.gid().unwrap(),
                body,
            ));
        }
        assert_eq!(
            seen,
            vec![
                ("./".into(), 0o700, 0, 0, vec![]),
                ("github_token".into(), 0o400, 0, 0, b"ghp_x".to_vec()),
            ]
        );
    }

    #[test]
    fn volume_and_setup_names_cannot_collide_with_a_sandbox() {
        assert_eq!(Role::Home.volume("fix-1"), "airlock-home-fix-1");
        assert_eq!(Role::Secrets.volume("fix-1"), "airlock-secrets-fix-1");
        // A sandbox name never holds a '.', so no sandbox's container is a set-up name.
        assert_eq!(setup_name("x"), "airlock-x.setup");
    }
}
