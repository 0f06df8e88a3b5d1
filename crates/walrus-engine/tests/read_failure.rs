//! A data-page read that fails with EIO is an error to the statement that needed the
//! page (58030, `io_error`), never a crash and never wrong rows; other tables and later
//! reads of the same page (once the device answers again) work. The failure is injected
//! through the engine's I/O hooks, which this test binary installs for itself.

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};

use walrus_engine::access::datum::{Datum, TypeId};
use walrus_engine::catalog::ColumnDef;
use walrus_engine::engine::Isolation;
use walrus_engine::io::{IoHooks, IoOp};
use walrus_engine::Engine;

/// Inode of the file whose page reads fail (0: none).
static FAILING_INODE: AtomicU64 = AtomicU64::new(0);

struct FailReads;

impl IoHooks for FailReads {
    fn around(
        &self,
        op: &IoOp<'_>,
        run: &mut dyn FnMut() -> std::io::Result<()>,
    ) -> std::io::Result<()> {
        if let IoOp::Read { file, .. } = op {
            let target = FAILING_INODE.load(Ordering::SeqCst);
            if target != 0 && file.metadata()?.ino() == target {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
        }
        run()
    }
}

fn create(e: &Engine, name: &str, rows: i32) {
    let mut t = e.begin(Isolation::ReadCommitted);
    let cols = vec![
        ColumnDef {
            name: "id".into(),
            ty: TypeId::Int4,
            not_null: true,
            typmod: -1,
            declared: Default::default(),
        },
        ColumnDef {
            name: "v".into(),
            ty: TypeId::Text,
            not_null: false,
            typmod: -1,
            declared: Default::default(),
        },
    ];
    t.create_table(name, cols, 100).unwrap();
    t.commit().unwrap();
    let def = e.catalog_view().unwrap().table(name).unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    for i in 0..rows {
        t.insert(&def, &[Datum::Int4(i), Datum::Text("x".repeat(100))])
            .unwrap();
    }
    t.commit().unwrap();
}

#[test]
fn an_eio_on_a_page_read_fails_only_that_statement() {
    walrus_engine::io::install_hooks(Box::new(FailReads)).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cfg = walrus_engine::settings::default_config_text(1 << 20)
        .replace("shared_buffers = \"128MB\"", "shared_buffers = \"4MB\"");
    Engine::init(dir.path(), Some(&cfg)).unwrap();
    {
        let (e, _) = Engine::open(dir.path()).unwrap();
        create(&e, "sick", 500);
        create(&e, "well", 500);
        e.shutdown().unwrap();
    }
    // A fresh engine: no page of either table is cached.
    let (e, _) = Engine::open(dir.path()).unwrap();
    let view = e.catalog_view().unwrap();
    let (sick, well) = (view.table("sick").unwrap(), view.table("well").unwrap());
    let path = dir.path().join("base").join(sick.relfile.0.to_string());
    FAILING_INODE.store(
        File::open(&path).unwrap().metadata().unwrap().ino(),
        Ordering::SeqCst,
    );
    let mut t = e.begin(Isolation::ReadCommitted);
    let err = t.scan_all(&sick).unwrap_err();
    assert_eq!(err.sqlstate(), "58030", "{err}");
    assert!(err.to_string().contains("Input/output error"), "{err}");
    t.rollback().unwrap();
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&well).unwrap().len(), 500);
    t.commit().unwrap();
    FAILING_INODE.store(0, Ordering::SeqCst);
    let mut t = e.begin(Isolation::ReadCommitted);
    assert_eq!(t.scan_all(&sick).unwrap().len(), 500);
    t.commit().unwrap();
    e.shutdown().unwrap();
}
