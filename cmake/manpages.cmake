# Manual pages of vrdma (section 1) and vrdmad (section 8), written from their --help when they
# are built (help2man, through cmake/man_page.sh: vrdma's page holds every subcommand's help too)
# and installed under share/man by `cmake --install`: scripts/setup.sh and the Debian package get
# them both.
option(VRDMA_MANPAGES "Write the manual pages of vrdma and vrdmad (needs help2man)" ON)
if(NOT VRDMA_MANPAGES)
  return()
endif()
find_program(HELP2MAN help2man)
if(NOT HELP2MAN)
  message(FATAL_ERROR "help2man not found: install it (scripts/setup.sh --deps installs it) or "
                      "configure with -DVRDMA_MANPAGES=OFF")
endif()

set(vrdma_man_dir ${PROJECT_BINARY_DIR}/man)
set(vrdma_man_gen ${PROJECT_SOURCE_DIR}/cmake/man_page.sh)
file(MAKE_DIRECTORY ${vrdma_man_dir})
# vrdma bench --help comes from this tree's bench/suite.py, device-plugin --help from this build's
# plugin, whatever an install elsewhere holds.
add_custom_command(
  OUTPUT ${vrdma_man_dir}/vrdma.1.gz
  COMMAND ${CMAKE_COMMAND} -E env VRDMA_DATADIR=${PROJECT_SOURCE_DIR}
          VRDMA_DEVICE_PLUGIN=$<TARGET_FILE:vrdma-device-plugin>
          sh ${vrdma_man_gen} ${HELP2MAN} $<TARGET_FILE:vrdma> vrdma 1 ${PROJECT_VERSION}
          "software RDMA for containers: sandbox, demo, bench, status, configuration, CDI"
          ${vrdma_man_dir}/vrdma.1.gz
  DEPENDS vrdma vrdma-device-plugin ${vrdma_man_gen} ${PROJECT_SOURCE_DIR}/bench/suite.py
  COMMENT "Writing the manual page of vrdma"
  VERBATIM)
add_custom_command(
  OUTPUT ${vrdma_man_dir}/vrdmad.8.gz
  COMMAND sh ${vrdma_man_gen} ${HELP2MAN} $<TARGET_FILE:vrdmad> vrdmad 8 ${PROJECT_VERSION}
          "per-host daemon of vrdma, software RDMA for containers" ${vrdma_man_dir}/vrdmad.8.gz
  DEPENDS vrdmad ${vrdma_man_gen}
  COMMENT "Writing the manual page of vrdmad"
  VERBATIM)
add_custom_target(manpages ALL DEPENDS ${vrdma_man_dir}/vrdma.1.gz ${vrdma_man_dir}/vrdmad.8.gz)
install(FILES ${vrdma_man_dir}/vrdma.1.gz DESTINATION share/man/man1)
install(FILES ${vrdma_man_dir}/vrdmad.8.gz DESTINATION share/man/man8)
