/* disk_fs.c: the disk tier's directory and files, owned and checked
 * (declared in disk_internal.h; see disk_tier.h for the layout).
 *
 * DIR holds every tenant's K/V, and SQLite adopts what it finds there: a
 * -wal file is replayed into the store and read from, a -shm file is shared
 * memory, and a file someone else opened before a chmod stays readable
 * through their descriptor. So the tier trusts DIR only when nobody else
 * can have put or opened anything in it, and otherwise refuses to start,
 * saying what is wrong and how to fix it:
 *   DIR      a directory (not a symlink), owned by the server's effective
 *            uid, with no group or other permission bits. A DIR the server
 *            creates is made 0700; an existing one is never chmod'ed: files
 *            could have been planted while it was open.
 *   above    every directory on DIR's canonical path owned by root or by us
 *            and not writable by group or others unless sticky (/tmp):
 *            otherwise another user could rename DIR away and put one of
 *            theirs at its path between our checks and SQLite's opens.
 *   files    lock, kv.sqlite and its -wal, -shm and -journal, when present:
 *            a regular file (looked at without following a symlink, opened
 *            O_NOFOLLOW and fstat'ed), ours, one link (no hard link to it
 *            elsewhere), no group or other permission bits.
 * SQLite opens its files by path: it is given the canonical path (no
 * symlinks, checked to be the directory we hold open) with
 * SQLITE_OPEN_NOFOLLOW, and as no one but us and root can change a
 * directory on that path, it reaches the files we checked. (A VFS of our
 * own opening through the directory's descriptor would give the same
 * guarantee for a few hundred lines over SQLite's unix VFS.) Cost: an lstat
 * per directory above DIR and per file at open, and a DIR below a
 * directory that others may write (a shared group directory, a
 * world-writable one without the sticky bit) is refused.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "kv/disk_internal.h"

#define FIX_FILES "move DIR's files away, or use a fresh directory the server creates"

/* Why the file sb describes is not one the tier may trust, or NULL. */
static const char *untrusted_file(const struct stat *sb, char *buf, size_t cap) {
    if (S_ISLNK(sb->st_mode)) return "is a symbolic link";
    if (!S_ISREG(sb->st_mode)) return "is not a regular file";
    if (sb->st_uid != geteuid()) {
        snprintf(buf, cap, "is owned by uid %u, not by this server (uid %u)",
                 (unsigned)sb->st_uid, (unsigned)geteuid());
        return buf;
    }
    if (sb->st_nlink != 1) {
        snprintf(buf, cap, "has %lu links (a hard link to it exists elsewhere)",
                 (unsigned long)sb->st_nlink);
        return buf;
    }
    if (sb->st_mode & 077) {
        snprintf(buf, cap, "is accessible to group or others (mode %04o)",
                 (unsigned)(sb->st_mode & 07777));
        return buf;
    }
    return NULL;
}

int disk_fs_check(int dir_fd, const char *dir, const char *name, char *err, size_t errlen) {
    struct stat sb;
    if (fstatat(dir_fd, name, &sb, AT_SYMLINK_NOFOLLOW)) {
        if (errno == ENOENT) return 0;
        seterr(err, errlen, "--kv-disk %s: cannot examine %s: %s", dir, name, strerror(errno));
        return -1;
    }
    char buf[128];
    const char *why = untrusted_file(&sb, buf, sizeof(buf));
    if (!why) return 0;
    seterr(err, errlen, "--kv-disk %s: %s/%s %s; the tier trusts only files it created itself: "
              FIX_FILES, dir, dir, name, why);
    return -1;
}

int disk_fs_open(int dir_fd, const char *dir, const char *name, char *err, size_t errlen) {
    /* looked at first without opening: opening a FIFO or a device can block
     * or act; then what was opened is checked again (it may have changed) */
    if (disk_fs_check(dir_fd, dir, name, err, errlen)) return -1;
    int fd = openat(dir_fd, name, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0600);
    if (fd < 0) {
        seterr(err, errlen, "--kv-disk %s: cannot open %s/%s: %s", dir, dir, name,
                  strerror(errno));
        return -1;
    }
    struct stat sb;
    char buf[128];
    const char *why = fstat(fd, &sb) ? strerror(errno) : untrusted_file(&sb, buf, sizeof(buf));
    if (!why) return fd;
    close(fd);
    seterr(err, errlen, "--kv-disk %s: %s/%s %s; the tier trusts only files it created itself: "
              FIX_FILES, dir, dir, name, why);
    return -1;
}

int disk_fs_same(int fd, const char *path) {
    struct stat a, b;
    return !fstat(fd, &a) && !lstat(path, &b) && a.st_dev == b.st_dev && a.st_ino == b.st_ino
               ? 0
               : -1;
}

/* Every directory above canon (a canonical path): owned by root or us, and
 * not writable by group or others unless sticky. */
static int check_above(const char *canon, const char *dir, char *err, size_t errlen) {
    char p[PATH_MAX];
    snprintf(p, sizeof(p), "%s", canon);
    for (char *slash; (slash = strrchr(p, '/'));) {
        slash[slash == p] = 0; /* the parent; "/" stays "/" */
        struct stat sb;
        const char *why = NULL;
        char buf[96];
        if (lstat(p, &sb)) {
            why = strerror(errno);
        } else if (!S_ISDIR(sb.st_mode)) {
            why = "is not a directory";
        } else if (sb.st_uid != 0 && sb.st_uid != geteuid()) {
            snprintf(buf, sizeof(buf), "is owned by uid %u", (unsigned)sb.st_uid);
            why = buf;
        } else if ((sb.st_mode & 022) && !(sb.st_mode & S_ISVTX)) {
            snprintf(buf, sizeof(buf), "is writable by group or others (mode %04o)",
                     (unsigned)(sb.st_mode & 07777));
            why = buf;
        }
        if (why) {
            seterr(err, errlen, "--kv-disk %s: %s, a directory above it, %s: another user "
                      "could replace DIR; keep DIR below directories that only you or root can "
                      "write (a sticky one such as /tmp is fine)", dir, p, why);
            return -1;
        }
        if (!strcmp(p, "/")) break;
    }
    return 0;
}

/* DIR itself, held open as fd: a directory of ours that no one else can
 * use; made says this call created it (then it may be made 0700). */
static int check_dir(int fd, const char *dir, bool made, char *err, size_t errlen) {
    struct stat sb;
    if (fstat(fd, &sb) || !S_ISDIR(sb.st_mode)) {
        seterr(err, errlen, "--kv-disk %s: not a directory", dir);
        return -1;
    }
    if (sb.st_uid != geteuid()) {
        seterr(err, errlen, "--kv-disk %s: owned by uid %u, not by this server (uid %u); the "
                  "tier holds every tenant's K/V and must be the server's own: use a fresh "
                  "directory", dir, (unsigned)sb.st_uid, (unsigned)geteuid());
        return -1;
    }
    if (!(sb.st_mode & 077)) return 0;
    if (!made) {
        seterr(err, errlen, "--kv-disk %s: accessible to group or others (mode %04o), so "
                  "files in it may have been planted or opened by another user; the tier will "
                  "not trust it: remove it and let the server create it, or make sure every file "
                  "in it is yours and run chmod 700 on it", dir, (unsigned)(sb.st_mode & 07777));
        return -1;
    }
    if (fchmod(fd, 0700)) { /* created with more than 0700 (a default ACL) */
        seterr(err, errlen, "--kv-disk %s: cannot make it private (chmod 0700): %s", dir,
                  strerror(errno));
        return -1;
    }
    return 0;
}

int disk_fs_open_dir(const char *dir, char *canon, size_t cap, char *err, size_t errlen) {
    const bool made = mkdir(dir, 0700) == 0;
    if (!made && errno != EEXIST) {
        seterr(err, errlen, "--kv-disk %s: cannot create the directory: %s", dir,
                  strerror(errno));
        return -1;
    }
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        const int e = errno;
        struct stat sb;
        const bool link = (e == ELOOP || e == ENOTDIR) && !lstat(dir, &sb) && S_ISLNK(sb.st_mode);
        seterr(err, errlen, "--kv-disk %s: %s", dir,
                  link           ? "is a symbolic link; give the directory itself"
                  : e == ENOTDIR ? "not a directory"
                                 : strerror(e));
        return -1;
    }
    char real[PATH_MAX];
    if (check_dir(fd, dir, made, err, errlen)) goto fail;
    if (!realpath(dir, real) || disk_fs_same(fd, real) || strlen(real) >= cap) {
        seterr(err, errlen, "--kv-disk %s: cannot resolve its path (or it changed while "
                  "being opened)", dir);
        goto fail;
    }
    if (check_above(real, dir, err, errlen)) goto fail;
    snprintf(canon, cap, "%s", real);
    return fd;
fail:
    close(fd);
    return -1;
}

int disk_fs_lock(int dir_fd, const char *dir, char *err, size_t errlen) {
    /* checked before the flock: a lock file someone else owns (or could
     * have opened) is untrusted, not "in use" */
    int fd = disk_fs_open(dir_fd, dir, "lock", err, errlen);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX | LOCK_NB)) {
        char pid[32] = "";
        ssize_t n = pread(fd, pid, sizeof(pid) - 1, 0);
        pid[n > 0 ? n : 0] = 0;
        pid[strcspn(pid, "\n")] = 0;
        seterr(err, errlen, "--kv-disk %s is in use by another process%s%s%s (its lock file is "
                  "held); each server needs its own directory", dir, pid[0] ? " (pid " : "",
                  pid, pid[0] ? ")" : "");
        close(fd);
        return -1;
    }
    char pid[32];
    int n = snprintf(pid, sizeof(pid), "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) == 0 && pwrite(fd, pid, (size_t)n, 0) < 0) {
        /* the pid is only a hint for the message above */
    }
    return fd;
}
