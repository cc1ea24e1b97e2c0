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

/// Cuts a page out of `items` (already filtered and sorted) after `marker`. An unknown marker is an error,
/// as on the real services (`Err(marker)`).
pub fn paginate<T>(
    items: Vec<T>,
    q: &QueryParams,
    id_of: impl Fn(&T) -> String,
) -> Result<Page<T>, String> {
    let page = q.page();
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
