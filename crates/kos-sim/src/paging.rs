//! limit/marker pagination with the `<collection>_links` "next" link Neutron, Nova, Octavia and Cinder
//! return (Glance's `next` is built by its own module from the same page).

use serde_json::{Value, json};

use crate::query::QueryParams;

/// One page of a collection, sorted by the caller.
#[derive(Debug)]
pub struct Page<T> {
    pub items: Vec<T>,
    /// The marker for the next page, when there is one.
    pub next_marker: Option<String>,
}

/// The most items Nova (`[api] max_limit`), Cinder (`osapi_max_limit`) and Octavia
/// (`[api_settings] pagination_max_limit`) return in one answer by default, with or without a
/// `limit`; a full page of it gets a next link. Neutron's `pagination_max_limit` defaults to none.
pub const MAX_LIMIT: usize = 1000;

/// Cuts a page out of `items` (already filtered and sorted) after `marker`. An unknown marker is an error,
/// as on the real services (`Err(marker)`). No cap on the page: Neutron's default.
pub fn paginate<T>(
    items: Vec<T>,
    q: &QueryParams,
    id_of: impl Fn(&T) -> String,
) -> Result<Page<T>, String> {
    paginate_within(items, q, None, id_of)
}

/// [`paginate`] for a service that returns at most `max` items in one answer: the page is
/// `min(limit, max)` long, `max` without a `limit`.
pub fn paginate_at_most<T>(
    items: Vec<T>,
    q: &QueryParams,
    max: usize,
    id_of: impl Fn(&T) -> String,
) -> Result<Page<T>, String> {
    paginate_within(items, q, Some(max), id_of)
}

fn paginate_within<T>(
    items: Vec<T>,
    q: &QueryParams,
    max: Option<usize>,
    id_of: impl Fn(&T) -> String,
) -> Result<Page<T>, String> {
    let mut page = q.page();
    if let Some(max) = max {
        page.limit = Some(page.limit.map_or(max, |l| l.min(max)));
    }
    let mut items = items;
    if page.page_reverse {
        items.reverse();
    }
    let start = match &page.marker {
        None => 0,
        Some(m) => match items.iter().position(|i| &id_of(i) == m) {
            Some(p) => p + 1,
            None => return Err(m.clone()),
        },
    };
    let mut rest: Vec<T> = items.into_iter().skip(start).collect();
    let next_marker = match page.limit {
        Some(limit) if rest.len() > limit => {
            rest.truncate(limit.max(1));
            rest.last().map(&id_of)
        }
        // A full page with a limit gets a next link even if nothing follows, like Neutron.
        Some(limit) if limit > 0 && rest.len() == limit => rest.last().map(&id_of),
        _ => None,
    };
    Ok(Page {
        items: rest,
        next_marker,
    })
}

/// `[{"rel": "next", "href": "<base_url><path>?<params>&limit=N&marker=M"}]`, or `None` on the last page.
pub fn next_links(
    base_url: &str,
    path: &str,
    q: &QueryParams,
    next_marker: Option<&str>,
) -> Option<Value> {
    let marker = next_marker?;
    let mut params = url::form_urlencoded::Serializer::new(String::new());
    for (k, v) in q.without_paging() {
        params.append_pair(&k, &v);
    }
    if let Some(limit) = q.page().limit {
        params.append_pair("limit", &limit.to_string());
    }
    params.append_pair("marker", marker);
    Some(json!([{"rel": "next", "href": format!("{base_url}{path}?{}", params.finish())}]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_service_pages_at_its_maximum_with_or_without_a_limit() {
        let items: Vec<String> = (0..1001).map(|i| format!("id{i:04}")).collect();
        let all = paginate_at_most(items.clone(), &QueryParams::parse(None), 1000, |s| {
            s.clone()
        })
        .expect("page");
        assert_eq!(all.items.len(), 1000);
        assert_eq!(all.next_marker.as_deref(), Some("id0999"));
        let big = QueryParams::parse(Some("limit=5000"));
        assert_eq!(
            paginate_at_most(items.clone(), &big, 1000, |s| s.clone())
                .expect("page")
                .items
                .len(),
            1000
        );
        let small = QueryParams::parse(Some("limit=3"));
        assert_eq!(
            paginate_at_most(items.clone(), &small, 1000, |s| s.clone())
                .expect("page")
                .items
                .len(),
            3
        );
        // Neutron's default: no cap.
        assert_eq!(
            paginate(items, &QueryParams::parse(None), |s| s.clone())
                .expect("page")
                .items
                .len(),
            1001
        );
    }

    #[test]
    fn pages_follow_the_marker() {
        let items: Vec<String> = (0..5).map(|i| format!("id{i}")).collect();
        let q = QueryParams::parse(Some("limit=2&tags=k"));
        let p = paginate(items.clone(), &q, |s| s.clone()).expect("page");
        assert_eq!(p.items, vec!["id0", "id1"]);
        assert_eq!(p.next_marker.as_deref(), Some("id1"));
        let link = next_links(
            "http://h",
            "/network/v2.0/ports",
            &q,
            p.next_marker.as_deref(),
        )
        .expect("link");
        assert_eq!(
            link[0]["href"],
            "http://h/network/v2.0/ports?tags=k&limit=2&marker=id1"
        );
        let q2 = QueryParams::parse(Some("limit=2&marker=id3"));
        let p2 = paginate(items.clone(), &q2, |s| s.clone()).expect("page");
        assert_eq!(p2.items, vec!["id4"]);
        assert!(p2.next_marker.is_none());
        assert!(
            paginate(items, &QueryParams::parse(Some("marker=nope")), |s| s
                .clone())
            .is_err()
        );
    }
}
