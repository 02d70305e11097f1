! A Fortran program (mpif.h-style bindings through `use mpi`) for 4 ranks: messages
! within and between the sites of VARGR_MPI_SITES=blocks:2, blocking and not, probed,
! any-source, and collectives. Each rank prints what it received; the output must be the
! same with and without libvargr_mpi.so, and the library must see the calls.
program shim_check
  use mpi
  implicit none
  integer, parameter :: n = 8192
  integer :: rank, size, ierr, far, near, i, count, src, flag
  integer :: status(MPI_STATUS_SIZE), reqs(2), stats(MPI_STATUS_SIZE, 2)
  double precision :: a(n), b(n), c(n), total
  integer :: ints(4 * 2000), got(4 * 2000)
  logical :: done
  integer :: dups(2), dreqs(4), k

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
  if (size /= 4) then
    if (rank == 0) print *, 'run with 4 ranks'
    call MPI_Abort(MPI_COMM_WORLD, 2, ierr)
  end if
  far = mod(rank + 2, 4)
  near = ieor(rank, 1)
  do i = 1, n
    a(i) = dble(mod(i + rank, 97)) * 0.25d0
  end do

  ! Blocking, to the other site and back.
  if (rank < 2) then
    call MPI_Send(a, n, MPI_DOUBLE_PRECISION, far, 1, MPI_COMM_WORLD, ierr)
    call MPI_Recv(b, n, MPI_DOUBLE_PRECISION, far, 2, MPI_COMM_WORLD, status, ierr)
  else
    call MPI_Recv(b, n, MPI_DOUBLE_PRECISION, far, 1, MPI_COMM_WORLD, status, ierr)
    call MPI_Send(a, n, MPI_DOUBLE_PRECISION, far, 2, MPI_COMM_WORLD, ierr)
  end if
  call MPI_Get_count(status, MPI_DOUBLE_PRECISION, count, ierr)
  write (*, '(a,i0,a,f0.2,a,i0,a,i0,a,i0)') 'rank ', rank, ': blocking ', sum(b), &
    ' count ', count, ' src ', status(MPI_SOURCE), ' tag ', status(MPI_TAG)

  ! Non-blocking both ways at once, completed together.
  call MPI_Irecv(c, n, MPI_DOUBLE_PRECISION, far, 3, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, n, MPI_DOUBLE_PRECISION, far, 3, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Waitall(2, reqs, stats, ierr)
  call MPI_Get_count(stats(:, 1), MPI_DOUBLE_PRECISION, count, ierr)
  write (*, '(a,i0,a,f0.2,a,i0,a,i0,a,l1)') 'rank ', rank, ': waitall ', sum(c), &
    ' count ', count, ' src ', stats(MPI_SOURCE, 1), ' null ', reqs(1) == MPI_REQUEST_NULL

  ! Probed from any source, then received at the size the probe said.
  if (rank == 0 .or. rank == 1) then
    call MPI_Send(a, n / 2, MPI_DOUBLE_PRECISION, rank + 2, 4, MPI_COMM_WORLD, ierr)
  else
    call MPI_Probe(MPI_ANY_SOURCE, 4, MPI_COMM_WORLD, status, ierr)
    call MPI_Get_count(status, MPI_DOUBLE_PRECISION, count, ierr)
    src = status(MPI_SOURCE)
    b = 0
    call MPI_Recv(b, count, MPI_DOUBLE_PRECISION, src, 4, MPI_COMM_WORLD, MPI_STATUS_IGNORE, ierr)
    write (*, '(a,i0,a,i0,a,i0,a,f0.2)') 'rank ', rank, ': probed ', count, ' from ', src, &
      ' sum ', sum(b)
  end if

  ! Within the site, and a test loop.
  call MPI_Irecv(c, n, MPI_DOUBLE_PRECISION, near, 5, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Send(a, n, MPI_DOUBLE_PRECISION, near, 5, MPI_COMM_WORLD, ierr)
  flag = 0
  do while (flag == 0)
    call test_once(reqs(1), flag)
  end do
  write (*, '(a,i0,a,f0.2)') 'rank ', rank, ': near ', sum(c)

  ! Collectives; the all-to-all's blocks cross the sites as frames.
  total = 0
  call MPI_Allreduce(sum(a), total, 1, MPI_DOUBLE_PRECISION, MPI_SUM, MPI_COMM_WORLD, ierr)
  do i = 1, 4 * 2000
    ints(i) = ((i - 1) / 2000) * 100000 + rank * 1000 + mod(i, 50)
  end do
  call MPI_Alltoall(ints, 2000, MPI_INTEGER, got, 2000, MPI_INTEGER, MPI_COMM_WORLD, ierr)
  b = a
  call MPI_Bcast(b, n, MPI_DOUBLE_PRECISION, 3, MPI_COMM_WORLD, ierr)
  write (*, '(a,i0,a,f0.2,a,i0,a,f0.2)') 'rank ', rank, ': allreduce ', total, &
    ' alltoall ', sum(int(got, kind=8)), ' bcast ', sum(b)

  ! Paused by MPI_PCONTROL(0): a message of tag 30 within the site leaves no record; one
  ! of tag 31, started before the pause and completed after it, is recorded.
  call MPI_Irecv(b, 16, MPI_DOUBLE_PRECISION, near, 31, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Isend(a, 16, MPI_DOUBLE_PRECISION, near, 31, MPI_COMM_WORLD, reqs(2), ierr)
  call MPI_Pcontrol(0)
  call MPI_Sendrecv(a, 16, MPI_DOUBLE_PRECISION, near, 30, c, 16, MPI_DOUBLE_PRECISION, &
    near, 30, MPI_COMM_WORLD, status, ierr)
  call MPI_Pcontrol(1)
  call MPI_Waitall(2, reqs, stats, ierr)
  write (*, '(a,i0,a,f0.2,a,f0.2)') 'rank ', rank, ': paused ', sum(c(1:16)), &
    ' around it ', sum(b(1:16))

  ! Polled with MPI_REQUEST_GET_STATUS (tag 32), then freed by MPI_WAIT.
  call MPI_Irecv(c, 16, MPI_DOUBLE_PRECISION, near, 32, MPI_COMM_WORLD, reqs(1), ierr)
  call MPI_Send(a, 16, MPI_DOUBLE_PRECISION, near, 32, MPI_COMM_WORLD, ierr)
  done = .false.
  do while (.not. done)
    call MPI_Request_get_status(reqs(1), done, status, ierr)
  end do
  call MPI_Wait(reqs(1), status, ierr)
  write (*, '(a,i0,a,f0.2)') 'rank ', rank, ': polled ', sum(c(1:16))

  ! Two duplicates of the world, first used in opposite orders by even and odd ranks
  ! (tags 50 and 51, to the neighbour): named as they are made, their messages pair up.
  call MPI_Comm_dup(MPI_COMM_WORLD, dups(1), ierr)
  call MPI_Comm_dup(MPI_COMM_WORLD, dups(2), ierr)
  do i = 1, 2
    if (mod(rank, 2) == 0) then
      k = i
    else
      k = 3 - i
    end if
    call MPI_Irecv(got(k), 1, MPI_INTEGER, near, 49 + k, dups(k), dreqs(2 * i - 1), ierr)
    call MPI_Isend(rank, 1, MPI_INTEGER, near, 49 + k, dups(k), dreqs(2 * i), ierr)
  end do
  call MPI_Waitall(4, dreqs, MPI_STATUSES_IGNORE, ierr)
  write (*, '(a,i0,a,i0,a,i0)') 'rank ', rank, ': duplicates ', got(1), ' ', got(2)
  call MPI_Comm_free(dups(1), ierr)
  call MPI_Comm_free(dups(2), ierr)

  call MPI_Finalize(ierr)

contains

  subroutine test_once(req, done)
    integer, intent(inout) :: req
    integer, intent(out) :: done
    logical :: flag
    integer :: st(MPI_STATUS_SIZE), e
    call MPI_Test(req, flag, st, e)
    done = merge(1, 0, flag)
  end subroutine test_once
end program shim_check
