//! Glance facade: finding the one image a cluster boots from.
//!
//! kos never guesses between images: a name or tag set that matches several is an error listing them,
//! as CAPO does (an image silently changing under a cluster is worse than a clear stop).

use crate::error::CloudError;
use crate::model::image::{Image, ImageFilter};
use crate::paging::util::{fetch, found};
use crate::request::{ApiRequest, ServiceKind};
use crate::session::Session;

const SVC: ServiceKind = ServiceKind::Image;

/// Glance, through one session: `session.image()`.
#[derive(Debug, Clone, Copy)]
pub struct ImageApi<'a> {
    session: &'a Session,
    page_size: Option<u32>,
}

impl Session {
    pub fn image(&self) -> ImageApi<'_> {
        ImageApi {
            session: self,
            page_size: None,
        }
    }
}

impl ImageApi<'_> {
    /// Lists ask for pages of `n` (Glance's default is 25).
    pub fn page_size(self, n: u32) -> Self {
        ImageApi {
            page_size: Some(n),
            ..self
        }
    }

    pub async fn get_image(&self, id: &str) -> Result<Option<Image>, CloudError> {
        found(
            fetch(
                self.session,
                ApiRequest::get(SVC, "image.get", format!("images/{id}")),
                "",
            )
            .await,
        )
    }

    /// Images matching the name and tags of `f` (its id is ignored here), all pages.
    pub async fn list_images(&self, f: &ImageFilter) -> Result<Vec<Image>, CloudError> {
        let mut r = ApiRequest::get(SVC, "image.list", "images");
        r.query = f.to_query();
        self.session.list_all(r, "images", self.page_size).await
    }

    /// Exactly one image: by id when given (checked against name and tags if those are given too), else
    /// by name and/or tags.
    ///
    /// Errors: [`CloudError::Lookup`], e.g. "image: 2 images named 'ubuntu': <id>, <id>; pass an id".
    pub async fn find_image(&self, f: &ImageFilter) -> Result<Image, CloudError> {
        let what = f.describe();
        let lookup = |detail: String| CloudError::Lookup {
            what: "image".into(),
            detail,
        };
        let matches = match &f.id {
            Some(id) => self
                .get_image(id)
                .await?
                .into_iter()
                .filter(|i| {
                    f.name.as_ref().is_none_or(|n| &i.name == n)
                        && f.tags.iter().all(|t| i.tags.contains(t))
                })
                .collect(),
            None => self.list_images(f).await?,
        };
        match matches.len() {
            1 => matches
                .into_iter()
                .next()
                .ok_or_else(|| lookup(format!("no {what}"))),
            0 => Err(lookup(format!("no {what}"))),
            n => Err(lookup(format!(
                "{n} {what}: {}; pass an id",
                matches
                    .iter()
                    .map(|i| i.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        }
    }

    /// Exactly one image whose id or name is `name_or_id` (an id wins).
    pub async fn find_image_by_name_or_id(&self, name_or_id: &str) -> Result<Image, CloudError> {
        if looks_like_uuid(name_or_id)
            && let Some(i) = self.get_image(name_or_id).await?
        {
            return Ok(i);
        }
        self.find_image(&ImageFilter::name(name_or_id)).await
    }
}

/// Glance ids are UUIDs; asking for a name as an id is a wasted call (and a 404 in the log).
fn looks_like_uuid(s: &str) -> bool {
    s.len() == 36
        && s.chars().enumerate().all(|(i, c)| {
            if [8, 13, 18, 23].contains(&i) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        })
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuids_are_recognised() {
        assert!(super::looks_like_uuid(
            "1bea47ed-f6a9-463b-b423-14b9cca9ad27"
        ));
        assert!(!super::looks_like_uuid("ubuntu-24.04"));
    }
}
