//! The JSON of etcd's v3 gRPC gateway, as its protobuf names it (api/etcdserverpb/rpc.proto): 64-bit
//! integers travel as strings (proto3 JSON); numbers are accepted too.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// An etcd member id (a `uint64`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MemberId(pub u64);

impl std::fmt::Display for MemberId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // etcdctl shows ids in hex.
        write!(f, "{:x}", self.0)
    }
}

impl Serialize for MemberId {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0.to_string())
    }
}

impl<'de> Deserialize<'de> for MemberId {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Number(u64),
        }
        match Raw::deserialize(d)? {
            Raw::Number(n) => Ok(Self(n)),
            Raw::Text(t) => t
                .parse()
                .map(Self)
                .map_err(|_| serde::de::Error::custom(format!("member id {t:?} is no uint64"))),
        }
    }
}

/// `etcdserverpb.Member`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Member {
    #[serde(rename = "ID")]
    pub id: MemberId,
    /// Empty while the member has not started (added, not yet running).
    #[serde(default)]
    pub name: String,
    #[serde(rename = "peerURLs", default)]
    pub peer_urls: Vec<String>,
    #[serde(rename = "clientURLs", default)]
    pub client_urls: Vec<String>,
    #[serde(rename = "isLearner", default)]
    pub is_learner: bool,
}

/// `etcdserverpb.MemberListResponse` (the header is not needed).
#[derive(Debug, Clone, Deserialize)]
pub struct MemberList {
    #[serde(default)]
    pub members: Vec<Member>,
}

/// `etcdserverpb.ResponseHeader`, as much as kos reads of it.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Header {
    pub member_id: Option<MemberId>,
}

/// `etcdserverpb.StatusResponse`, as much as kos reads of it.
#[derive(Debug, Clone, Deserialize)]
pub struct Status {
    #[serde(default)]
    pub header: Header,
    /// 0 (absent) when the member knows no leader.
    #[serde(default = "no_leader")]
    pub leader: MemberId,
    /// Alarms and health problems the member reports (`NOSPACE`, ...).
    #[serde(default)]
    pub errors: Vec<String>,
    #[serde(rename = "isLearner", default)]
    pub is_learner: bool,
}

fn no_leader() -> MemberId {
    MemberId(0)
}

/// `etcdserverpb.MemberRemoveRequest`.
#[derive(Debug, Clone, Serialize)]
pub struct MemberRemove {
    #[serde(rename = "ID")]
    pub id: MemberId,
}

/// A gateway error body (`{"error": .., "code": <gRPC code>, "message": ..}`).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GatewayError {
    #[serde(default)]
    pub code: Option<i32>,
    #[serde(default)]
    pub message: Option<String>,
    #[serde(default)]
    pub error: Option<String>,
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_member_list_as_the_gateway_sends_it() {
        let text = r#"{"header":{"cluster_id":"14841639068965178418","member_id":"10276657743932975437","raft_term":"2"},
            "members":[{"ID":"10276657743932975437","name":"cp-0","peerURLs":["https://10.0.0.5:2380"],"clientURLs":["https://10.0.0.5:2379"]},
                       {"ID":"1","peerURLs":["https://10.0.0.6:2380"],"isLearner":true}]}"#;
        let l: MemberList = serde_json::from_str(text).unwrap();
        assert_eq!(l.members[0].id, MemberId(10_276_657_743_932_975_437));
        assert_eq!(l.members[0].name, "cp-0");
        assert!(!l.members[0].is_learner && l.members[1].is_learner);
        assert_eq!(l.members[1].name, "", "not started yet");
    }

    #[test]
    fn ids_go_out_as_strings_and_come_in_either_way() {
        let body = serde_json::to_string(&MemberRemove {
            id: MemberId(u64::MAX),
        })
        .unwrap();
        assert_eq!(body, r#"{"ID":"18446744073709551615"}"#);
        let s: Status = serde_json::from_str(
            r#"{"header":{"member_id":7},"leader":"7","raftIndex":"9","errors":["NOSPACE"]}"#,
        )
        .unwrap();
        assert_eq!(
            (s.header.member_id, s.leader),
            (Some(MemberId(7)), MemberId(7))
        );
        assert_eq!(s.errors, ["NOSPACE"]);
        assert!(serde_json::from_str::<Member>(r#"{"ID":"-1"}"#).is_err());
    }
}
