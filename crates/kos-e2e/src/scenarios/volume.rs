//! A volume: created with kos's metadata (Cinder volumes have no tags), available, metadata merged,
//! found by a metadata filter, deleted.

use anyhow::{Result, ensure};
use kos_cloud::model::block_storage::{VolumeCreate, VolumeFilter, VolumeStatus};

use crate::{Ctx, Made, RUN_KEY};

pub async fn volume(ctx: &Ctx) -> Result<()> {
    ctx.guarded(async |made| {
        let bs = ctx.session.block_storage();
        let run = &ctx.run;
        let v = bs
            .create_volume(&VolumeCreate {
                size: 1,
                name: Some(run.name("vol")),
                metadata: [(RUN_KEY.to_owned(), run.prefix.clone())].into(),
                ..Default::default()
            })
            .await?;
        made.push(Made::Volume(v.id.clone()));
        let v = bs.wait_for_available(&v.id, ctx.deadline()).await?;
        ensure!(v.size == 1 && v.attachments.is_empty(), "volume: {v:?}");

        let merged = bs
            .merge_metadata(&v.id, &[("role".to_owned(), "etcd".to_owned())].into())
            .await?;
        ensure!(
            merged.get(RUN_KEY) == Some(&run.prefix) && merged.contains_key("role"),
            "merged: {merged:?}"
        );
        let filter = VolumeFilter {
            metadata: [
                ("role".to_owned(), "etcd".to_owned()),
                (RUN_KEY.to_owned(), run.prefix.clone()),
            ]
            .into(),
            ..Default::default()
        };
        let found = bs.list_volumes(&filter).await?;
        ensure!(
            found.len() == 1 && found[0].id == v.id,
            "by metadata: {}",
            found.len()
        );
        let by_status = bs
            .list_volumes(&VolumeFilter {
                status: Some(VolumeStatus::Available),
                ..filter
            })
            .await?;
        ensure!(
            by_status.len() == 1,
            "by metadata and status: {}",
            by_status.len()
        );

        bs.delete_volume(&v.id).await?;
        ctx.poll("volume to go", || async {
            Ok(bs.get_volume(&v.id).await?.is_none().then_some(()))
        })
        .await?;
        Ok(())
    })
    .await
}
