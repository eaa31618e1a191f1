//! Operation handlers, one file per family. `dispatch` is the op table's handler column.

pub mod attr;
pub mod dir;
pub mod fh;
pub mod file;
pub mod lock;
pub mod session;

use crate::compound::{Compound, OpError, OpResult};
use crate::nfs::{nfs_argop4 as A, nfsstat4};

pub fn dispatch(c: &mut Compound, arg: A) -> OpResult {
    match arg {
        A::OP_ACCESS(a) => attr::access(c, &a),
        A::OP_CLOSE(a) => file::close(c, &a),
        A::OP_COMMIT(a) => file::commit(c, &a),
        A::OP_CREATE(a) => dir::create(c, a),
        A::OP_GETATTR(a) => attr::getattr(c, &a),
        A::OP_GETFH => fh::getfh(c),
        A::OP_LINK(a) => dir::link(c, &a),
        A::OP_LOCK(a) => lock::lock(c, &a),
        A::OP_LOCKT(a) => lock::lockt(c, &a),
        A::OP_LOCKU(a) => lock::locku(c, &a),
        A::OP_LOOKUP(a) => fh::lookup(c, &a),
        A::OP_LOOKUPP => fh::lookupp(c),
        A::OP_NVERIFY(a) => attr::nverify(c, &a),
        A::OP_OPEN(a) => file::open(c, a),
        A::OP_OPEN_DOWNGRADE(a) => file::open_downgrade(c, &a),
        A::OP_PUTFH(a) => fh::putfh(c, &a),
        A::OP_PUTPUBFH => fh::putpubfh(c),
        A::OP_PUTROOTFH => fh::putrootfh(c),
        A::OP_READ(a) => file::read(c, &a),
        A::OP_READDIR(a) => dir::readdir(c, &a),
        A::OP_READLINK => dir::readlink(c),
        A::OP_REMOVE(a) => dir::remove(c, &a),
        A::OP_RENAME(a) => dir::rename(c, &a),
        A::OP_RESTOREFH => fh::restorefh(c),
        A::OP_SAVEFH => fh::savefh(c),
        A::OP_SECINFO(a) => fh::secinfo(c, &a),
        A::OP_SETATTR(a) => attr::setattr(c, &a),
        A::OP_VERIFY(a) => attr::verify(c, &a),
        A::OP_WRITE(a) => file::write(c, a),
        A::OP_BIND_CONN_TO_SESSION(a) => session::bind_conn_to_session(c, &a),
        A::OP_EXCHANGE_ID(a) => session::exchange_id(c, &a),
        A::OP_CREATE_SESSION(a) => session::create_session(c, &a),
        A::OP_DESTROY_SESSION(a) => session::destroy_session(c, &a),
        A::OP_FREE_STATEID(a) => lock::free_stateid(c, &a),
        A::OP_SECINFO_NO_NAME(a) => fh::secinfo_no_name(c, &a),
        A::OP_TEST_STATEID(a) => lock::test_stateid(c, &a),
        A::OP_DESTROY_CLIENTID(a) => session::destroy_clientid(c, &a),
        A::OP_RECLAIM_COMPLETE(a) => session::reclaim_complete(c, &a),
        _ => Err(OpError::Status(nfsstat4::NFS4ERR_NOTSUPP)),
    }
}
