//! Listing a whole collection, page by page.
//!
//! Nova, Neutron, Octavia and Cinder answer a limited list with `"<collection>_links": [{"rel": "next",
//! "href": …}]`, Glance with `"next": "/v2/images?marker=…"`. The href is absolute (or, for Glance,
//! rooted at the unversioned endpoint), so only its query is taken: the next request is the original path
//! with the original filters, overlaid by the href's parameters (its `marker`, `limit`, …). That keeps
//! working when a cloud's next link omits some of our filters or points at an internal host name.
//!
//! Cost: a list of N items with page size P takes ⌈N/P⌉ calls. A page shorter than P is the last one,
//! even if the service still sent a next link; a full last page needs one more (empty) call to be sure,
//! as on Neutron.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{
    self, DeserializeOwned, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor,
};
use serde_json::Value;

use crate::error::{ApiErrorKind, CloudError};
use crate::request::{ApiRequest, ApiResponse};
use crate::session::Session;

/// Stops a service that keeps sending the same next link from looping forever.
const MAX_PAGES: usize = 100_000;

impl Session {
    /// Every item of the collection `key` (`"ports"`, `"servers"`, `"images"`, …) that `req` lists,
    /// following next links. `page_size` sets `limit` on every request (`None`: the service's default,
    /// still following next links when the service pages anyway).
    pub async fn list_all<T: DeserializeOwned>(
        &self,
        req: ApiRequest,
        key: &str,
        page_size: Option<u32>,
    ) -> Result<Vec<T>, CloudError> {
        let base = match page_size {
            Some(n) => req.query("limit", n.to_string()),
            None => req,
        };
        let mut out = Vec::new();
        let mut next = base.clone();
        let mut last_marker: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let rsp = self.send(next.clone()).await?;
            let page: Page<T> = decode_page(&rsp, key)?;
            let n = page.items.len();
            out.extend(page.items);
            // A short page is not the last one when it links a next: a service cuts pages at
            // its own cap (Nova's max_limit, Cinder's osapi_max_limit, Glance's api_limit_max,
            // Octavia's pagination_max_limit) whatever the limit asked.
            let Some(q) = page.next.filter(|_| n > 0) else {
                return Ok(out);
            };
            let marker = q
                .iter()
                .find(|(k, _)| k == "marker")
                .map(|(_, v)| v.clone());
            if marker.is_some() && marker == last_marker {
                return Err(CloudError::Decode {
                    service: base.service,
                    operation: base.operation,
                    detail: format!("the next link repeats marker {marker:?}"),
                });
            }
            last_marker = marker;
            next = base.clone();
            next.query.retain(|(k, _)| !q.iter().any(|(qk, _)| qk == k));
            next.query.extend(q);
        }
        Err(CloudError::Decode {
            service: base.service,
            operation: base.operation,
            detail: format!("more than {MAX_PAGES} pages"),
        })
    }
}

/// How often a sized listing starts again after its marker vanished (see
/// [`Session::list_all_sized`]).
const RESTARTS: u32 = 3;

impl Session {
    /// Every item of the collection `key` that `req` lists, in pages whose `limit` `limit_for`
    /// chooses from the items listed so far (a list whose items vary widely in size, as pools by
    /// their member references, keeps each answer small this way).
    ///
    /// Every next link of a non-empty page is followed, short page or not: a service that caps
    /// the page below the asked limit (Octavia's `pagination_max_limit`) sends one on a short
    /// page. A page whose marker the service no longer knows (its item was deleted between two
    /// pages: Octavia answers 400, others 404) starts the listing again, up to three times.
    pub async fn list_all_sized<T: DeserializeOwned>(
        &self,
        req: ApiRequest,
        key: &str,
        mut limit_for: impl FnMut(&[T]) -> u32,
    ) -> Result<Vec<T>, CloudError> {
        let mut restarts = 0;
        'listing: loop {
            let mut out: Vec<T> = Vec::new();
            let mut marker: Option<String> = None;
            for _ in 0..MAX_PAGES {
                let mut next = req
                    .clone()
                    .query("limit", limit_for(&out).max(1).to_string());
                if let Some(m) = &marker {
                    next = next.query("marker", m.clone());
                }
                let rsp = match self.send(next).await {
                    Ok(rsp) => rsp,
                    Err(e)
                        if marker.is_some()
                            && restarts < RESTARTS
                            && matches!(
                                e.kind(),
                                Some(ApiErrorKind::BadRequest | ApiErrorKind::NotFound)
                            ) =>
                    {
                        restarts += 1;
                        tracing::debug!(
                            operation = req.operation,
                            "the page's marker is gone, listing again: {e}"
                        );
                        continue 'listing;
                    }
                    Err(e) => return Err(e),
                };
                let page: Page<T> = decode_page(&rsp, key)?;
                let n = page.items.len();
                out.extend(page.items);
                let Some(m) = page
                    .next
                    .filter(|_| n > 0)
                    .and_then(|q| q.into_iter().find(|(k, _)| k == "marker").map(|(_, v)| v))
                else {
                    return Ok(out);
                };
                if marker.as_ref() == Some(&m) {
                    return Err(CloudError::Decode {
                        service: req.service,
                        operation: req.operation,
                        detail: format!("the next link repeats marker {m:?}"),
                    });
                }
                marker = Some(m);
            }
            return Err(CloudError::Decode {
                service: req.service,
                operation: req.operation,
                detail: format!("more than {MAX_PAGES} pages"),
            });
        }
    }

    /// One page of the collection `key`: at most `limit` items after `marker`, and the marker of
    /// the next page as the service's next link names it (`None`: this was the last page).
    pub async fn list_page<T: DeserializeOwned>(
        &self,
        req: ApiRequest,
        key: &str,
        limit: Option<u32>,
        marker: Option<&str>,
    ) -> Result<(Vec<T>, Option<String>), CloudError> {
        let mut req = req;
        if let Some(n) = limit {
            req = req.query("limit", n.to_string());
        }
        if let Some(m) = marker {
            req = req.query("marker", m);
        }
        let rsp = self.send(req).await?;
        let page: Page<T> = decode_page(&rsp, key)?;
        let n = page.items.len();
        let short_page = limit.is_some_and(|p| n < p as usize);
        let next = page
            .next
            .filter(|_| n > 0 && !short_page)
            .and_then(|q| q.into_iter().find(|(k, _)| k == "marker").map(|(_, v)| v));
        Ok((page.items, next))
    }
}

/// A page's items and, if there is a next page, the query of its link.
#[derive(Debug)]
struct Page<T> {
    items: Vec<T>,
    next: Option<Vec<(String, String)>>,
}

/// Decodes a list answer straight into its typed items: no JSON value tree of the page is built
/// (a page of a thousand pools with 500 member ids each is ~25 MB of JSON, and was hundreds of
/// MiB as `serde_json::Value`s).
fn decode_page<T: DeserializeOwned>(rsp: &ApiResponse, key: &str) -> Result<Page<T>, CloudError> {
    parse_page(&rsp.body, key).map_err(|e| CloudError::Decode {
        service: rsp.service,
        operation: rsp.operation,
        detail: e.to_string(),
    })
}

fn parse_page<T: DeserializeOwned>(body: &[u8], key: &str) -> Result<Page<T>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let page = PageSeed::<T> {
        key,
        _items: PhantomData,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(page)
}

/// `body[key]` decoded straight from the bytes (the rest skipped, no `Value` tree of the
/// answer: a fully populated load balancer's answer carries every member), `None` when the
/// answer has no `key`.
pub(crate) fn parse_keyed<T: DeserializeOwned>(
    body: &[u8],
    key: &str,
) -> Result<Option<T>, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let found = KeyedSeed::<T> {
        key,
        _item: PhantomData,
    }
    .deserialize(&mut de)?;
    de.end()?;
    Ok(found)
}

struct KeyedSeed<'k, T> {
    key: &'k str,
    _item: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for KeyedSeed<'_, T> {
    type Value = Option<T>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for KeyedSeed<'_, T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object with {:?}", self.key)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<T>, A::Error> {
        let mut found = None;
        while let Some(k) = map.next_key::<std::borrow::Cow<'de, str>>()? {
            if k == self.key {
                // The last of repeated keys, as a `Value` would keep.
                found = Some(map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(found)
    }
}

/// Reads `{"<key>": [...], "<key>_links": [...]}` (or Glance's `"next": "…"`), skipping the rest.
struct PageSeed<'k, T> {
    key: &'k str,
    _items: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for PageSeed<'_, T> {
    type Value = Page<T>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Page<T>, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for PageSeed<'_, T> {
    type Value = Page<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "an object with a {:?} list", self.key)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Page<T>, A::Error> {
        let links_key = format!("{}_links", self.key);
        let mut items = Vec::new();
        let mut links: Option<Value> = None;
        let mut glance_next: Option<Value> = None;
        while let Some(k) = map.next_key::<String>()? {
            if k == self.key {
                items = map.next_value_seed(ItemsSeed::<T> {
                    key: self.key,
                    _items: PhantomData,
                })?;
            } else if k == links_key {
                links = Some(map.next_value()?);
            } else if k == "next" {
                glance_next = Some(map.next_value()?);
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        let href = links
            .as_ref()
            .and_then(Value::as_array)
            .and_then(|links| {
                links
                    .iter()
                    .find(|l| l.get("rel").and_then(Value::as_str) == Some("next"))
                    .and_then(|l| l.get("href").and_then(Value::as_str))
            })
            .or_else(|| glance_next.as_ref().and_then(Value::as_str));
        Ok(Page {
            items,
            next: href.map(href_query),
        })
    }
}

/// The collection's list (`null`: empty); an item that does not decode is named by its index.
struct ItemsSeed<'k, T> {
    key: &'k str,
    _items: PhantomData<T>,
}

impl<'de, T: DeserializeOwned> DeserializeSeed<'de> for ItemsSeed<'_, T> {
    type Value = Vec<T>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Vec<T>, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de, T: DeserializeOwned> Visitor<'de> for ItemsSeed<'_, T> {
    type Value = Vec<T>;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{:?} as a list", self.key)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Vec<T>, E> {
        Ok(Vec::new())
    }

    fn visit_none<E: de::Error>(self) -> Result<Vec<T>, E> {
        Ok(Vec::new())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<T>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        loop {
            match seq.next_element::<T>() {
                Ok(Some(item)) => out.push(item),
                Ok(None) => return Ok(out),
                Err(e) => {
                    return Err(de::Error::custom(format_args!(
                        "{}[{}]: {e}",
                        self.key,
                        out.len()
                    )));
                }
            }
        }
    }
}

/// The query pairs of an absolute or rooted href.
fn href_query(href: &str) -> Vec<(String, String)> {
    let query = href.split_once('?').map_or("", |(_, q)| q);
    let query = query.split_once('#').map_or(query, |(q, _)| q);
    url::form_urlencoded::parse(query.as_bytes())
        .into_owned()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn page(body: Value, key: &str) -> Result<Page<Value>, serde_json::Error> {
        parse_page(body.to_string().as_bytes(), key)
    }

    #[test]
    fn next_links_of_every_flavour_are_found() -> Result<(), serde_json::Error> {
        let p = page(
            json!({"ports": [{"id": "a"}], "ports_links": [{"rel": "previous", "href": "x?marker=z"}, {"rel": "next", "href": "http://h:9696/v2.0/ports?tags=k%3Dv&limit=1&marker=a"}]}),
            "ports",
        )?;
        assert_eq!(p.items.len(), 1);
        assert_eq!(
            p.next,
            Some(vec![
                ("tags".into(), "k=v".into()),
                ("limit".into(), "1".into()),
                ("marker".into(), "a".into())
            ])
        );
        let p = page(
            json!({"images": [], "next": "/v2/images?marker=m"}),
            "images",
        )?;
        assert_eq!(p.next, Some(vec![("marker".into(), "m".into())]));
        let p = page(json!({"servers": [], "servers_links": "odd"}), "servers")?;
        assert_eq!(p.next, None);
        let p = page(json!({"servers": null}), "servers")?;
        assert!(p.items.is_empty());
        assert!(page(json!({"servers": 1}), "servers").is_err());
        assert!(page(json!([]), "servers").is_err());
        Ok(())
    }

    #[test]
    fn an_item_that_does_not_decode_is_named_by_its_index() {
        #[derive(Debug, serde::Deserialize)]
        struct Item {
            #[allow(dead_code)]
            id: String,
        }
        let body = json!({"ports": [{"id": "a"}, {"id": 7}]}).to_string();
        let e = parse_page::<Item>(body.as_bytes(), "ports").map(|p| p.items.len());
        assert!(
            e.as_ref()
                .is_err_and(|e| e.to_string().starts_with("ports[1]: ")),
            "{e:?}"
        );
    }

    #[test]
    fn one_object_is_read_from_its_key_the_rest_skipped() {
        #[derive(Debug, PartialEq, serde::Deserialize)]
        struct Lb {
            id: String,
            #[serde(default)]
            pools: Vec<Value>,
        }
        let body = json!({
            "other": {"deep": [1, {"x": null}]},
            "loadbalancer": {"id": "a", "pools": [{"members": [{"id": "m"}]}], "extra": true},
            "tail": "s"
        })
        .to_string();
        let lb = parse_keyed::<Lb>(body.as_bytes(), "loadbalancer")
            .ok()
            .flatten();
        assert_eq!(lb.as_ref().map(|l| l.id.as_str()), Some("a"));
        assert_eq!(lb.map(|l| l.pools.len()), Some(1));

        let missing = parse_keyed::<Lb>(br#"{"listener": {"id": "a"}}"#, "loadbalancer");
        assert!(matches!(missing, Ok(None)), "{missing:?}");
        let wrong = parse_keyed::<Lb>(br#"{"loadbalancer": {"id": 7}}"#, "loadbalancer");
        assert!(wrong.is_err());
        let not_an_object = parse_keyed::<Lb>(b"[]", "loadbalancer");
        assert!(not_an_object.is_err());
        let trailing = parse_keyed::<Lb>(br#"{"loadbalancer": {"id": "a"}} x"#, "loadbalancer");
        assert!(trailing.is_err());
    }
}

/// Request helpers the facades share.
pub(crate) mod util {
    use serde::Serialize;
    use serde::de::DeserializeOwned;
    use serde_json::Value;

    use crate::error::CloudError;
    use crate::request::ApiRequest;
    use crate::session::Session;

    /// Sends `req` and decodes `body[key]` (the whole body when `key` is empty).
    pub(crate) async fn fetch<T: DeserializeOwned>(
        s: &Session,
        req: ApiRequest,
        key: &str,
    ) -> Result<T, CloudError> {
        let rsp = s.send(req).await?;
        if key.is_empty() {
            return rsp.json();
        }
        let decode = |detail| CloudError::Decode {
            service: rsp.service,
            operation: rsp.operation,
            detail,
        };
        match super::parse_keyed(&rsp.body, key) {
            Ok(Some(v)) => Ok(v),
            Ok(None) => Err(decode(format!("the answer has no {key:?}"))),
            Err(e) => Err(decode(format!("{key}: {e}"))),
        }
    }

    /// Sends `req`, ignoring the (empty) body.
    pub(crate) async fn run(s: &Session, req: ApiRequest) -> Result<(), CloudError> {
        s.send(req).await.map(drop)
    }

    /// `Ok(None)` for a 404: "is it there?" is a normal question, not an error.
    pub(crate) fn found<T>(r: Result<T, CloudError>) -> Result<Option<T>, CloudError> {
        match r {
            Ok(v) => Ok(Some(v)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// `Ok(())` for a 404: deleting what is gone is done.
    pub(crate) fn gone(r: Result<(), CloudError>) -> Result<(), CloudError> {
        found(r).map(drop)
    }

    /// `{"<key>": req}` (a local encoding failure is a bug in a request type, reported as such).
    pub(crate) fn body(key: &str, req: &impl Serialize) -> Result<Value, CloudError> {
        let v = serde_json::to_value(req).map_err(|e| CloudError::Invalid {
            what: format!("{key} request"),
            detail: format!("cannot encode: {e}"),
        })?;
        Ok(serde_json::json!({ key: v }))
    }

    /// Exactly one of `items`, or a [`CloudError::Lookup`] saying what was found.
    pub(crate) fn exactly_one<T>(
        mut items: Vec<T>,
        what: impl FnOnce() -> String,
        id_of: impl Fn(&T) -> &str,
        hint: &str,
    ) -> Result<T, CloudError> {
        match items.len() {
            1 => Ok(items.remove(0)),
            0 => Err(CloudError::Lookup {
                what: what(),
                detail: "none found".into(),
            }),
            n => Err(CloudError::Lookup {
                what: what(),
                detail: format!(
                    "{n} found: {}{}",
                    items.iter().map(&id_of).collect::<Vec<_>>().join(", "),
                    if hint.is_empty() {
                        String::new()
                    } else {
                        format!("; {hint}")
                    }
                ),
            }),
        }
    }
}

/// Waiting for an object to reach a state, by GET with backoff.
pub(crate) mod wait {
    use std::future::Future;
    use std::time::Duration;

    use tokio::time::Instant;

    use crate::error::CloudError;

    /// One look at the object.
    pub(crate) enum Step<T> {
        Done(T),
        /// Not yet; the current state, for the timeout message.
        Pending(String),
    }

    /// First pause between polls; doubles up to [`MAX_DELAY`]. Short enough for a fast simulator, and
    /// the doubling keeps a slow real cloud (LB create: minutes) at a few calls per minute.
    const FIRST_DELAY: Duration = Duration::from_millis(20);
    const MAX_DELAY: Duration = Duration::from_secs(5);

    /// Probes until `Done`, an error, or `deadline` (then a [`CloudError::Timeout`] naming `what` and
    /// its last state).
    pub(crate) async fn until<T, F, Fut>(
        what: &str,
        deadline: Instant,
        mut probe: F,
    ) -> Result<T, CloudError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<Step<T>, CloudError>>,
    {
        let start = Instant::now();
        let mut delay = FIRST_DELAY;
        loop {
            let state = match probe().await? {
                Step::Done(v) => return Ok(v),
                Step::Pending(state) => state,
            };
            let now = Instant::now();
            if now >= deadline {
                return Err(CloudError::Timeout {
                    what: what.to_owned(),
                    detail: format!("still {state} after {:.1}s", (now - start).as_secs_f64()),
                });
            }
            tokio::time::sleep(delay.min(deadline - now)).await;
            delay = (delay * 2).min(MAX_DELAY);
        }
    }
}
