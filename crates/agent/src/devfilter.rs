//! A cgroup v2 device filter: on a pure v2 host the kernel decides which device files a
//! cgroup's processes may open only through an eBPF program of type `CGROUP_DEVICE`
//! attached to the cgroup (v1's `devices.allow` and `devices.deny` do not exist there). The
//! agent attaches one to each replica's cgroup that denies the GPUs the replica was not
//! given, and allows every other device, as v1's deny list did on hybrid hosts.
//!
//! The program is a dozen instructions, built here and loaded with the bpf(2) system call
//! (as runc and crun do): no compiler for the BPF target, no object file. It reads the
//! device's type, major and minor from its context (`struct bpf_cgroup_dev_ctx`), and
//! returns 0 (deny) for a character device of one major whose minor is listed, 1 otherwise.
//! Attached without flags, a later attach to the same cgroup replaces it, so a reused cgroup
//! never keeps an older replica's filter; it goes with the cgroup when that is removed.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Most minors one filter denies: a node's GPUs (NVIDIA numbers them below 255).
pub const MAX_DENIED: usize = 256;

/// `BPF_PROG_TYPE_CGROUP_DEVICE` and `BPF_CGROUP_DEVICE` (linux/bpf.h).
const PROG_TYPE_CGROUP_DEVICE: u32 = 15;
const ATTACH_CGROUP_DEVICE: u32 = 6;
/// bpf(2) commands.
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_PROG_ATTACH: libc::c_long = 8;
/// `BPF_DEVCG_DEV_CHAR`: the low 16 bits of the context's `access_type`.
const DEV_CHAR: i32 = 2;
/// Bytes of the verifier's log kept for an error.
const LOG_BYTES: usize = 4096;

#[derive(Debug, thiserror::Error)]
pub enum FilterError {
    #[error("{denied} device minors to deny: at most {MAX_DENIED}")]
    TooMany { denied: usize },
    #[error("the kernel refused the device program: {source}{}", verifier_said(.log))]
    Load { source: std::io::Error, log: String },
    #[error("cgroup {path}: cannot attach the device program: {source}")]
    Attach { path: std::path::PathBuf, source: std::io::Error },
    #[error("cgroup {path}: {source}")]
    Open { path: std::path::PathBuf, source: std::io::Error },
}

fn verifier_said(log: &str) -> String {
    if log.trim().is_empty() { String::new() } else { format!(" (verifier: {})", log.trim()) }
}

/// One BPF instruction (`struct bpf_insn`): opcode, registers (source high nibble,
/// destination low), offset, immediate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

const fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, regs: (src << 4) | dst, off, imm }
}

/// `rDST = *(u32 *)(rSRC + off)`.
const fn load_u32(dst: u8, src: u8, off: i16) -> Insn {
    insn(0x61, dst, src, off, 0)
}
/// `rDST &= imm` (64-bit).
const fn and(dst: u8, imm: i32) -> Insn {
    insn(0x57, dst, 0, 0, imm)
}
/// `if rDST != imm goto +off`.
const fn jump_ne(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x55, dst, 0, off, imm)
}
/// `if rDST == imm goto +off`.
const fn jump_eq(dst: u8, imm: i32, off: i16) -> Insn {
    insn(0x15, dst, 0, off, imm)
}
/// `r0 = imm; exit`.
const fn ret(imm: i32) -> [Insn; 2] {
    [insn(0xb7, 0, 0, 0, imm), insn(0x95, 0, 0, 0, 0)]
}

/// The program: deny a character device of `major` whose minor is in `denied`, allow the rest.
fn program(major: u32, denied: &[u32]) -> Vec<Insn> {
    // The verifier refuses unreachable instructions: with nothing to deny, "deny" would be.
    if denied.is_empty() {
        return ret(1).to_vec();
    }
    let n = denied.len() as i16;
    // Layout: 0-5 read and check type and major, 6.. one check per minor, then "allow"
    // (two instructions) at 6 + n and "deny" at 8 + n. A jump at instruction i to t has
    // offset t - (i + 1).
    let (allow, deny) = (6 + n, 8 + n);
    let mut p = vec![
        load_u32(2, 1, 0), // access_type: (access << 16) | type
        and(2, 0xffff),
        jump_ne(2, DEV_CHAR, allow - 3),
        load_u32(3, 1, 4), // major
        jump_ne(3, major as i32, allow - 5),
        load_u32(4, 1, 8), // minor
    ];
    for (i, &minor) in denied.iter().enumerate() {
        p.push(jump_eq(4, minor as i32, deny - (6 + i as i16 + 1)));
    }
    p.extend(ret(1));
    p.extend(ret(0));
    debug_assert_eq!(p.len() as i16, deny + 2);
    p
}

/// `union bpf_attr` as BPF_PROG_LOAD reads it, up to `expected_attach_type`; the kernel
/// takes the size given and requires nothing past it.
#[repr(C)]
#[derive(Default)]
struct LoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; 16],
    prog_ifindex: u32,
    expected_attach_type: u32,
}

/// Loads a program denying character devices `major`:`denied` (allowing every other device);
/// its file descriptor, to attach to cgroups. The verifier's log is asked for only when a
/// load fails, by a second load: a replica's start does not pay for it.
pub fn load(major: u32, denied: &[u32]) -> Result<OwnedFd, FilterError> {
    if denied.len() > MAX_DENIED {
        return Err(FilterError::TooMany { denied: denied.len() });
    }
    let insns = program(major, denied);
    let license = c"GPL";
    let mut attr = LoadAttr {
        prog_type: PROG_TYPE_CGROUP_DEVICE,
        insn_cnt: insns.len() as u32,
        insns: insns.as_ptr() as u64,
        license: license.as_ptr() as u64,
        expected_attach_type: ATTACH_CGROUP_DEVICE,
        ..LoadAttr::default()
    };
    if let Ok(fd) = prog_load(&attr) {
        return Ok(fd);
    }
    let mut log = vec![0u8; LOG_BYTES];
    (attr.log_level, attr.log_size, attr.log_buf) = (1, LOG_BYTES as u32, log.as_mut_ptr() as u64);
    prog_load(&attr).map_err(|source| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        FilterError::Load { source, log: String::from_utf8_lossy(&log[..end]).into_owned() }
    })
}

/// bpf(BPF_PROG_LOAD) of `attr`, whose pointers must be alive.
fn prog_load(attr: &LoadAttr) -> std::io::Result<OwnedFd> {
    // SAFETY: bpf(2) reads `attr` and what its pointers name (the caller keeps them alive until
    // this returns), and writes only into the log buffer it names, if any.
    let fd = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, attr as *const LoadAttr, size_of::<LoadAttr>()) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) })
}

/// Attaches `program` to the v2 cgroup at `dir`, replacing one attached before.
pub fn attach(program: &OwnedFd, dir: &Path) -> Result<(), FilterError> {
    let cgroup = std::fs::File::open(dir).map_err(|source| FilterError::Open { path: dir.to_path_buf(), source })?;
    // `union bpf_attr` for BPF_PROG_ATTACH: target_fd, attach_bpf_fd, attach_type,
    // attach_flags (0: one program, replaced by the next attach).
    let attr: [u32; 8] = [cgroup.as_raw_fd() as u32, program.as_raw_fd() as u32, ATTACH_CGROUP_DEVICE, 0, 0, 0, 0, 0];
    // SAFETY: bpf(2) only reads `attr`; both descriptors stay open until it returns.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, BPF_PROG_ATTACH, attr.as_ptr(), std::mem::size_of_val(&attr)) };
    if rc < 0 {
        return Err(FilterError::Attach { path: dir.to_path_buf(), source: std::io::Error::last_os_error() });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program as the kernel would, over one device access.
    fn verdict(p: &[Insn], kind: u32, major: u32, minor: u32) -> i64 {
        let ctx = [kind | (7 << 16), major, minor];
        let mut r = [0i64; 11];
        let mut pc = 0usize;
        loop {
            let i = p[pc];
            let (dst, src) = ((i.regs & 0xf) as usize, (i.regs >> 4) as usize);
            pc += 1;
            match i.code {
                0x61 => {
                    assert_eq!(src, 1, "loads read the context");
                    r[dst] = i64::from(ctx[i.off as usize / 4]);
                }
                0x57 => r[dst] &= i64::from(i.imm),
                0x55 if r[dst] != i64::from(i.imm) => pc += i.off as usize,
                0x15 if r[dst] == i64::from(i.imm) => pc += i.off as usize,
                0x55 | 0x15 => {}
                0xb7 => r[dst] = i64::from(i.imm),
                0x95 => return r[0],
                other => panic!("opcode {other:#x} at {}", pc - 1),
            }
        }
    }

    #[test]
    fn the_program_denies_exactly_the_listed_minors_of_its_major_for_character_devices() {
        for denied in [vec![], vec![1], vec![0, 2, 3], (0..200).collect::<Vec<u32>>()] {
            let p = program(195, &denied);
            for minor in 0..260 {
                let want = if denied.contains(&minor) { 0 } else { 1 };
                assert_eq!(verdict(&p, 2, 195, minor), want, "char 195:{minor}, denied {denied:?}");
                assert_eq!(verdict(&p, 1, 195, minor), 1, "a block device 195:{minor} is not a GPU");
                assert_eq!(verdict(&p, 2, 1, minor), 1, "char 1:{minor} is not a GPU");
            }
        }
    }

    #[test]
    fn too_many_minors_are_refused_before_the_kernel_is_asked() {
        let many: Vec<u32> = (0..=MAX_DENIED as u32).collect();
        assert!(matches!(load(195, &many), Err(FilterError::TooMany { denied }) if denied == MAX_DENIED + 1));
    }
}
