//! Glance: images, and the filter kos uses to pick exactly one.

use serde::{Deserialize, Serialize};

use super::common::{nullable, string_enum};

string_enum!(
    ImageStatus {
        Queued = "queued",
        Saving = "saving",
        Uploading = "uploading",
        Importing = "importing",
        Active = "active",
        Deactivated = "deactivated",
        Killed = "killed",
        Deleted = "deleted",
        PendingDelete = "pending_delete",
    }
);

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct Image {
    pub id: String,
    #[serde(deserialize_with = "nullable")]
    pub name: String,
    pub status: ImageStatus,
    #[serde(deserialize_with = "nullable")]
    pub tags: Vec<String>,
    pub visibility: Option<String>,
    pub disk_format: Option<String>,
    /// Bytes.
    pub size: Option<u64>,
    /// GiB.
    pub min_disk: u64,
    /// MiB.
    pub min_ram: u64,
    pub owner: Option<String>,
    pub os_distro: Option<String>,
    pub created_at: Option<String>,
    pub updated_at: Option<String>,
}

/// Which image to use. A name or tags may match several images: the facade then refuses to guess.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ImageFilter {
    pub id: Option<String>,
    pub name: Option<String>,
    /// All of these tags.
    pub tags: Vec<String>,
}

impl ImageFilter {
    pub fn id(id: impl Into<String>) -> Self {
        ImageFilter {
            id: Some(id.into()),
            ..Default::default()
        }
    }

    pub fn name(name: impl Into<String>) -> Self {
        ImageFilter {
            name: Some(name.into()),
            ..Default::default()
        }
    }

    pub fn tags<I: IntoIterator<Item = S>, S: Into<String>>(tags: I) -> Self {
        ImageFilter {
            tags: tags.into_iter().map(Into::into).collect(),
            ..Default::default()
        }
    }

    /// Glance list parameters (the id, if any, is looked up directly instead).
    pub fn to_query(&self) -> Vec<(String, String)> {
        let mut q: Vec<(String, String)> = self
            .tags
            .iter()
            .map(|t| ("tag".to_owned(), t.clone()))
            .collect();
        if let Some(n) = &self.name {
            q.push(("name".into(), n.clone()));
        }
        q
    }

    /// Human description, for errors ("images named 'ubuntu' tagged [k8s]").
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        if let Some(id) = &self.id {
            parts.push(format!("with id {id}"));
        }
        if let Some(n) = &self.name {
            parts.push(format!("named '{n}'"));
        }
        if !self.tags.is_empty() {
            parts.push(format!("tagged [{}]", self.tags.join(", ")));
        }
        if parts.is_empty() {
            "images".into()
        } else {
            format!("images {}", parts.join(" "))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::parse_sample;

    type R = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn images_parse() -> R {
        let l: Vec<Image> = parse_sample("image/v2/samples/images-list-response.json", "images")?;
        assert_eq!(l.len(), 2);
        assert_eq!(l[0].status, ImageStatus::Active);
        let i: Image = parse_sample("image/v2/samples/image-show-response.json", "")?;
        assert!(!i.id.is_empty());
        let _: Image = parse_sample("image/v2/samples/image-create-response.json", "")?;
        Ok(())
    }

    #[test]
    fn filters_render_glance_params() {
        let f = ImageFilter {
            name: Some("ubuntu".into()),
            tags: vec!["a".into(), "b".into()],
            id: None,
        };
        assert_eq!(
            f.to_query(),
            vec![
                ("tag".into(), "a".into()),
                ("tag".into(), "b".into()),
                ("name".into(), "ubuntu".into())
            ]
        );
        assert_eq!(f.describe(), "images named 'ubuntu' tagged [a, b]");
    }
}
