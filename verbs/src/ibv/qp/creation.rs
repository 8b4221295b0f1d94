//! How a QP is made so that its receives are written by the device, never
//! by the CPU. Posting with a safe [`Sge`](super::super::Sge) is sound
//! because the HCA checks a region's key before it writes its memory, and a
//! region closed or dropped is deregistered first. Two providers copy a
//! receive's bytes with the CPU instead, when the CQ is *polled*, with no
//! key check, so a region given back between the completion and the poll
//! would be written after it was freed:
//!
//! - mlx5 (scatter-to-CQE, on by default for RC QPs): its QPs are made
//!   here with it turned off;
//! - hns (inline receives, which no creation flag turns off): a QP that
//!   takes receives is made there only on the caller's promise
//!   ([`QpCaps::allow_cpu_copied_receives`]), and refused otherwise.
//!
//! Which provider a device has is asked of the kernel (the driver sysfs
//! names), not of the provider: before rdma-core v22 `mlx5dv_query_device`
//! answered for any device, and its `mlx5dv_create_qp` ran mlx5's code on
//! whatever context it was given.

use super::super::{QpCaps, ffi, zeroed};
use std::ffi::{OsStr, OsString};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// How a QP is made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Creation {
    /// `ibv_create_qp`.
    Plain,
    /// `mlx5dv_create_qp` with scatter-to-CQE off.
    WithoutScatterToCqe,
}

/// How to make a QP with `caps` on the device of the live context `ctx`,
/// or why no way is safe ([`Unsupported`](io::ErrorKind::Unsupported)).
pub(super) fn creation_on(ctx: *mut ffi::ibv_context, caps: &QpCaps) -> io::Result<Creation> {
    // SAFETY: a live context (the caller's) and its device, whose
    // `ibdev_path` libibverbs fills with a NUL-terminated sysfs path.
    let path = unsafe { std::ffi::CStr::from_ptr((*(*ctx).device).ibdev_path.as_ptr()) };
    let path = Path::new(OsStr::from_bytes(path.to_bytes()));
    let driver = kernel_driver(path);
    refuse_if_single_threaded(path, &driver, mlx5_single_threaded_by_env())?;
    creation(path, driver, scatter_to_cqe_off_by_env(), caps)
}

/// Refuse a QP on an mlx5 device (or one that cannot be told from one,
/// `driver` as [`kernel_driver`] found it) when `single_threaded` says the
/// environment declared the process single-threaded to libmlx5
/// (`MLX5_SINGLE_THREADED=1`, read when a context is opened): its QPs' and
/// CQs' locks are then no-ops, while a [`QueuePair`](super::QueuePair) is
/// posted to from any thread and a driver polls its CQs on a thread of its
/// own while others destroy or modify QPs on them (a destroy cleans the CQ
/// under that lock). The environment is read when the QP is made;
/// libmlx5 reads it when a context is opened, so a process that changes
/// the variable in between (`std::env::set_var` is `unsafe` for such
/// reasons) is not covered.
fn refuse_if_single_threaded(
    path: &Path,
    driver: &io::Result<Option<OsString>>,
    single_threaded: bool,
) -> io::Result<()> {
    let maybe_mlx5 = match driver {
        Ok(Some(d)) => is_mlx5_driver(d),
        Ok(None) => false,
        Err(_) => true,
    };
    if !(single_threaded && maybe_mlx5) {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        format!(
            "MLX5_SINGLE_THREADED=1 in the environment turns libmlx5's QP and CQ locks \
             off, and {} is (or cannot be told from) an mlx5 device: this crate's QPs \
             are posted to from any thread and its driver polls CQs on its own",
            path.display()
        ),
    ))
}

/// libmlx5's `MLX5_SINGLE_THREADED` switch, on only when it is exactly
/// `1` (as libmlx5 reads it).
fn mlx5_single_threaded_by_env() -> bool {
    std::env::var_os("MLX5_SINGLE_THREADED").is_some_and(|v| v == "1")
}

/// How to make a QP with `caps` on the device at sysfs path `path`, whose
/// kernel driver is `driver` (as [`kernel_driver`] found it), when
/// `scatter_off_by_env` says libmlx5 turns scatter-to-CQE off itself.
///
/// An unreadable sysfs entry answers nothing: the QP is refused unless
/// neither hazard can arise (the environment switch is set, and the QP
/// takes no receives or its caller promised what hns needs).
fn creation(
    path: &Path,
    driver: io::Result<Option<OsString>>,
    scatter_off_by_env: bool,
    caps: &QpCaps,
) -> io::Result<Creation> {
    let unpromised_receives = caps.max_recv_wr > 0 && !caps.cpu_copied_receives;
    let hns_refusal = |why: &str| {
        io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{why}: hns copies inline receives into their memory with the CPU when \
                 the CQ is polled, and no flag turns that off; a QP that takes receives \
                 there needs QpCaps::allow_cpu_copied_receives",
            ),
        )
    };
    match driver {
        Err(e) if !scatter_off_by_env => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "cannot tell whether {} is an mlx5 device, whose QPs need scatter-to-CQE \
                 off ({e}); MLX5_SCATTER_TO_CQE=0 in the environment turns it off for \
                 every QP",
                path.display()
            ),
        )),
        Err(e) if unpromised_receives => Err(hns_refusal(&format!(
            "cannot tell whether {} is an hns device ({e})",
            path.display()
        ))),
        Ok(Some(d)) if is_hns_driver(&d) && unpromised_receives => {
            Err(hns_refusal(&format!("{} is an hns device", path.display())))
        }
        Ok(Some(d)) if is_mlx5_driver(&d) && !scatter_off_by_env => {
            Ok(Creation::WithoutScatterToCqe)
        }
        _ => Ok(Creation::Plain),
    }
}

/// The kernel driver of the RDMA device at sysfs path `ibdev_path`
/// (`<ibdev_path>/device/driver`), if it has a parent device bound to one:
/// `None` only where sysfs says there is none (no `device` entry, as for a
/// software device such as rxe, or no `driver` entry under it). Any other
/// failure to read them is an error, not "no driver": an mlx5 device
/// taken for a driverless one would get its QPs with scatter-to-CQE on.
fn kernel_driver(ibdev_path: &Path) -> io::Result<Option<OsString>> {
    std::fs::metadata(ibdev_path)?;
    let parent = ibdev_path.join("device");
    match std::fs::symlink_metadata(&parent) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        r => r?,
    };
    // The parent itself (a link into a part of sysfs that cannot be
    // read tells nothing).
    std::fs::metadata(&parent)?;
    match std::fs::read_link(parent.join("driver")) {
        Ok(driver) => Ok(driver.file_name().map(Into::into)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// `mlx5_core`, or a flavour of it (`mlx5_core.sf`, a sub-function's).
fn is_mlx5_driver(driver: &OsStr) -> bool {
    driver.as_bytes().starts_with(b"mlx5_core")
}

/// HiSilicon's: `hns3` (the PCI function a RoCE device of hip08 and later
/// hangs off), `hns_roce`/`hns_roce_hw_v1` (hip06's platform device).
fn is_hns_driver(driver: &OsStr) -> bool {
    driver.as_bytes().starts_with(b"hns")
}

/// libmlx5's own switch (`MLX5_SCATTER_TO_CQE=0` in the environment,
/// read at each QP's creation by every rdma-core that has the feature)
/// turns scatter-to-CQE off for every QP: then the plain call is safe.
fn scatter_to_cqe_off_by_env() -> bool {
    std::env::var_os("MLX5_SCATTER_TO_CQE").is_some_and(|v| v == "0")
}

/// `ibv_create_qp` on an mlx5 device, with scatter-to-CQE off; null
/// (with `errno`) where that cannot be asked: `EINVAL` before rdma-core
/// v21, which has no such flag, `EOPNOTSUPP` if `libmlx5.so.1` cannot be
/// loaded. The QP is then refused, not made with the copy on.
///
/// By default libmlx5 asks for it on every RC QP: a receive of up to 32
/// (or 64) bytes, and with `sq_sig_all` an RDMA read of as many, lands in
/// the CQE, and the provider copies it to the work request's buffer with
/// `memcpy` when the CQ is polled, on the polling thread, without the key
/// check the HCA makes (and a region read while a receive is outstanding
/// would race a plain CPU write).
///
/// # Safety
/// As `ibv_create_qp`: a live PD of the live context `ctx`, live CQs of it.
pub(super) unsafe fn create_without_scatter_to_cqe(
    ctx: *mut ffi::ibv_context,
    pd: *mut ffi::ibv_pd,
    init: &mut ffi::ibv_qp_init_attr,
) -> *mut ffi::ibv_qp {
    let mut attr: ffi::ibv_qp_init_attr_ex = zeroed();
    attr.send_cq = init.send_cq;
    attr.recv_cq = init.recv_cq;
    attr.cap = init.cap;
    attr.qp_type = init.qp_type;
    attr.sq_sig_all = init.sq_sig_all;
    attr.comp_mask = ffi::ibv_qp_init_attr_mask::IBV_QP_INIT_ATTR_PD.0;
    attr.pd = pd;
    let mut dv: ffi::mlx5dv_qp_init_attr = zeroed();
    dv.comp_mask =
        u64::from(ffi::mlx5dv_qp_init_attr_mask::MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS.0);
    dv.create_flags = ffi::mlx5dv_qp_create_flags::MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE.0;
    // SAFETY: the caller's contract; both attribute structs are ours and
    // writable. libmlx5's `ibv_create_qp` is this very call with no mlx5
    // attributes, and writes the granted capabilities back the same way.
    let qp = unsafe { ffi::mlx5dv_create_qp(ctx, &mut attr, &mut dv) };
    init.cap = attr.cap;
    qp
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    /// A sysfs-like tree: `<root>/<dev>/device/driver` linking to a driver
    /// directory named `driver`, or no parent device at all (`None`).
    fn ibdev(root: &Path, dev: &str, driver: Option<&str>) -> std::path::PathBuf {
        let ibdev = root.join(dev);
        std::fs::create_dir_all(&ibdev).unwrap();
        if let Some(driver) = driver {
            let target = root.join("bus/drivers").join(driver);
            std::fs::create_dir_all(&target).unwrap();
            let parent = root.join("devices").join(dev);
            std::fs::create_dir_all(&parent).unwrap();
            symlink(&target, parent.join("driver")).unwrap();
            symlink(&parent, ibdev.join("device")).unwrap();
        }
        ibdev
    }

    #[test]
    fn the_driver_is_read_from_sysfs_and_mlx5_and_hns_are_told_by_it() {
        let root = std::env::temp_dir().join(format!("evd-ibdev-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let cases = [
            ("mlx5_0", Some("mlx5_core"), (true, false)),
            // Renamed by udev: the driver still says.
            ("rocep1s0f0", Some("mlx5_core"), (true, false)),
            ("mlx5_sf", Some("mlx5_core.sf"), (true, false)),
            ("mlx4_0", Some("mlx4_core"), (false, false)),
            ("hns_0", Some("hns3"), (false, true)),
            ("hns_1", Some("hns_roce"), (false, true)),
            // A software device with no parent: neither, whatever its name.
            ("rxe0", None, (false, false)),
            ("mlx5_fake", None, (false, false)),
        ];
        for (dev, driver, (mlx5, hns)) in cases {
            let path = ibdev(&root, dev, driver);
            let found = kernel_driver(&path).unwrap();
            assert_eq!(found.as_deref(), driver.map(OsStr::new), "{dev}");
            assert_eq!(found.as_deref().is_some_and(is_mlx5_driver), mlx5, "{dev}");
            assert_eq!(found.as_deref().is_some_and(is_hns_driver), hns, "{dev}");
        }
        // A parent device bound to no driver: none.
        let unbound = ibdev(&root, "unbound", None);
        std::fs::create_dir_all(root.join("devices/unbound")).unwrap();
        symlink(root.join("devices/unbound"), unbound.join("device")).unwrap();
        assert_eq!(kernel_driver(&unbound).unwrap(), None);
        // No answer (not "no driver", which would say "neither"): a device
        // whose sysfs directory cannot be read, a parent link into nothing,
        // a `driver` entry that is no link (readlink fails with EINVAL).
        assert!(kernel_driver(&root.join("unreadable")).is_err());
        let dangling = ibdev(&root, "dangling", None);
        symlink(root.join("devices/gone"), dangling.join("device")).unwrap();
        assert!(kernel_driver(&dangling).is_err());
        let odd = ibdev(&root, "odd", None);
        std::fs::create_dir_all(odd.join("device/driver")).unwrap();
        let err = kernel_driver(&odd).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::EINVAL), "{err}");
        std::fs::remove_dir_all(&root).unwrap();
    }

    /// An mlx5 device, or one that cannot be told from one, gets no QP
    /// under `MLX5_SINGLE_THREADED=1`; every other device, and every device
    /// without it, is left to [`creation`].
    #[test]
    fn no_qp_on_an_mlx5_device_whose_locks_the_environment_turned_off() {
        let path = Path::new("/sys/class/infiniband/dev0");
        let driver = |d: &str| Ok(Some(OsString::from(d)));
        let unreadable = || Err(io::Error::from_raw_os_error(libc::EACCES));
        let cases: [(io::Result<Option<OsString>>, bool, bool); 8] = [
            (driver("mlx5_core"), true, false),
            (driver("mlx5_core.sf"), true, false),
            (unreadable(), true, false),
            (driver("mlx4_core"), true, true),
            (Ok(None), true, true),
            (driver("mlx5_core"), false, true),
            (unreadable(), false, true),
            (Ok(None), false, true),
        ];
        for (i, (driver, single, allowed)) in cases.into_iter().enumerate() {
            let r = refuse_if_single_threaded(path, &driver, single);
            assert_eq!(r.is_ok(), allowed, "case {i}");
            if let Err(e) = r {
                assert_eq!(e.kind(), io::ErrorKind::Unsupported, "case {i}");
            }
        }
    }

    /// Every case of [`creation`]: the CPU never writes a receive unless
    /// the caller promised what that needs.
    #[test]
    fn a_qp_whose_receives_the_cpu_would_write_is_refused_unless_promised() {
        let path = Path::new("/sys/class/infiniband/dev0");
        let driver = |d: &str| Ok(Some(OsString::from(d)));
        let unreadable = || Err(io::Error::from_raw_os_error(libc::EACCES));
        let receives = QpCaps::default();
        let send_only = QpCaps {
            max_recv_wr: 0,
            ..QpCaps::default()
        };
        // SAFETY: never used to make a QP.
        let promised = unsafe { QpCaps::default().allow_cpu_copied_receives() };
        use Creation::{Plain, WithoutScatterToCqe};
        let refused = || Err(io::ErrorKind::Unsupported);
        type Case = (
            io::Result<Option<OsString>>,
            bool,
            QpCaps,
            Result<Creation, io::ErrorKind>,
        );
        #[rustfmt::skip]
        let cases: [Case; 14] = [
            (Ok(None), false, receives, Ok(Plain)),
            (driver("mlx4_core"), false, receives, Ok(Plain)),
            (driver("mlx5_core"), false, receives, Ok(WithoutScatterToCqe)),
            (driver("mlx5_core"), false, send_only, Ok(WithoutScatterToCqe)),
            // libmlx5 turns it off itself.
            (driver("mlx5_core"), true, receives, Ok(Plain)),
            (driver("hns3"), false, receives, refused()),
            (driver("hns3"), true, receives, refused()),
            (driver("hns3"), false, send_only, Ok(Plain)),
            (driver("hns3"), false, promised, Ok(Plain)),
            // Unreadable: could be either.
            (unreadable(), false, send_only, refused()),
            (unreadable(), false, promised, refused()),
            (unreadable(), true, receives, refused()),
            (unreadable(), true, send_only, Ok(Plain)),
            (unreadable(), true, promised, Ok(Plain)),
        ];
        for (i, (driver, env, caps, want)) in cases.into_iter().enumerate() {
            let got = creation(path, driver, env, &caps).map_err(|e| e.kind());
            assert_eq!(got, want, "case {i}");
        }
    }
}
